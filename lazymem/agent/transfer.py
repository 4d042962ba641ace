"""Bulk import and export of users' histories: `lazymem import` and `lazymem export`.

    lazymem import FILE [--format jsonl|longmemeval|locomo] [--user U] [--tenant T] [overrides]
    lazymem export USER [--vectors] [--tenant T] [overrides] > FILE.jsonl

Formats read:
- `jsonl`: one message per line, `{"role", "text", "time"?, "session_id"?, "user_id"?, "vectors"?}` (what
  `lazymem export` writes; `--user` names the user of lines without `user_id`);
- `longmemeval`: a LongMemEval JSON file, one user per question's haystack (the user id is the question id);
- `locomo`: a LoCoMo JSON file, one user per conversation (its `sample_id`), the two speakers kept as
  named roles.

Every message carries its position in the source (`source`: file name and line, or history and message
index), and the store keeps a position once per user: an import killed at any point and run again stores
each message exactly once, even where a history repeats a short turn like "ok" word for word. The import
adds in batches (agent.limits.max_messages_per_add at most), each one transaction. Retention counts from
the time of import (`added`), not from the messages' own `time`.

`--vectors` exports each message's embedding vectors too (lazymem/agent/vectors.py), and an import stores
those its own retrieval config would have made, so the user is not embedded again. Both commands therefore
compose the retrieval config (`retrieval=...` as the deployment has it; no model loads for that).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

FORMATS = ("jsonl", "longmemeval", "locomo")


@dataclass(frozen=True)
class UserHistory:
    """One user's messages from a source, each a dict for `Memory.add` with its `source` position."""

    user_id: str
    messages: list[dict]


def read_histories(path: str | Path, format: str, user_id: str | None = None) -> Iterator[UserHistory]:
    """The users of a file, in file order. Malformed input raises DataError naming file, record and field."""
    path = Path(path)
    if format == "jsonl":
        yield from _jsonl(path, user_id)
    elif format == "longmemeval":
        from lazymem.data import longmemeval

        for history in longmemeval.load(str(path)).histories.values():
            yield _from_history(path, history.id, history)
    elif format == "locomo":
        from lazymem.data import locomo
        from lazymem.data.io import read_json

        everything = list(range(len(read_json(path))))
        kinds = {c: str(c) for c in range(1, 6)}  # questions are not imported; their categories only parse
        for history in locomo.load(str(path), everything, tuple(kinds), kinds).histories.values():
            yield _from_history(path, history.id, history)
    else:
        raise ValueError(f"unknown import format {format!r}; expected one of {list(FORMATS)}")


def _from_history(path: Path, user_id: str, history) -> UserHistory:
    messages = [
        {
            "role": m.role,
            "text": m.text,
            "time": m.time,
            "session_id": m.session_id,
            "source": f"{path.name}:{history.id}:{m.idx}",
        }
        for m in history.messages
    ]
    return UserHistory(user_id, messages)


def _jsonl(path: Path, default_user: str | None) -> Iterator[UserHistory]:
    """Consecutive lines of one user form one history (an export writes each user's lines together)."""
    from lazymem.data.schema import DataError

    current: UserHistory | None = None
    with open(path, encoding="utf-8") as f:
        for line_no, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except ValueError as e:
                raise DataError(path, f"line {line_no}", None, f"not JSON ({e.msg})") from None
            if not isinstance(record, dict):
                raise DataError(path, f"line {line_no}", None, "expected a JSON object per line")
            user = record.get("user_id", default_user)
            if not isinstance(user, str) or not user:
                raise DataError(path, f"line {line_no}", "user_id", "missing (or pass --user)")
            message = {k: record.get(k) for k in ("role", "text", "time", "session_id", "vectors")}
            message["source"] = f"{path.name}:{line_no}"
            if current is None or current.user_id != user:
                if current is not None:
                    yield current
                current = UserHistory(user, [])
            current.messages.append(message)
    if current is not None:
        yield current


def export_lines(user_id: str, messages: Sequence[dict]) -> Iterator[str]:
    """An export as JSONL: one line per message, oldest first; what `read_histories(..., "jsonl")` reads."""
    for m in messages:
        yield json.dumps({"user_id": user_id, **m}, ensure_ascii=False)


def main(command: str, argv: Sequence[str]) -> int:
    """`lazymem import ...` / `lazymem export ...` (see the module docstring)."""
    from lazymem.agent.inputs import BadInput
    from lazymem.agent.memory import DEFAULT_TENANT, Memory
    from lazymem.agent.store import UnknownUser
    from lazymem.data.schema import DataError

    parser = argparse.ArgumentParser(prog=f"lazymem {command}")
    if command == "import":
        parser.add_argument("file")
        parser.add_argument("--format", choices=FORMATS, default="jsonl")
        parser.add_argument("--user", help="the user of jsonl lines without user_id")
    else:
        parser.add_argument("user")
        parser.add_argument("--vectors", action="store_true", help="with each message's embedding vectors")
    parser.add_argument("--tenant", default=DEFAULT_TENANT)
    args, overrides = parser.parse_known_args(argv)
    # retrieval-only: a retriever names the vectors, and no memory model is needed to store or read
    with Memory.from_config([*overrides, "method=rag"]) as memory:
        try:
            if command == "export":  # page by page: a user of any size in bounded memory
                for part in memory.export_pages(args.user, tenant=args.tenant, vectors=args.vectors):
                    for line in export_lines(args.user, part):
                        print(line)
            else:
                _import(memory, args)
        except (BadInput, DataError, UnknownUser) as e:
            print(f"lazymem {command}: {e}", file=sys.stderr)
            return 1
    return 0


def _import(memory, args: argparse.Namespace) -> None:
    total = 0
    for history in read_histories(args.file, args.format, args.user):
        total += memory.import_(
            history.user_id,
            history.messages,
            tenant=args.tenant,
            progress=lambda n, user=history.user_id: print(f"{user}: {n} messages", file=sys.stderr),
        )
    print(f"imported {total} messages from {args.file}", file=sys.stderr)
