"""Bulk import and export of users' histories: `lazymem import` and `lazymem export`.

    lazymem import FILE [--format jsonl|longmemeval|locomo] [--user U] [--tenant T] [overrides]
    lazymem export USER [--vectors] [--tenant T] [overrides] > FILE.jsonl

Formats read:
- `jsonl`: one message per line, `{"role", "text", "time"?, "session_id"?, "user_id"?, "source"?,
  "vectors"?}` (what `lazymem export` writes; `--user` names the user of lines without `user_id`);
- `longmemeval`: a LongMemEval JSON file, one user per question's haystack (the user id is the question id);
- `locomo`: a LoCoMo JSON file, one user per conversation (its `sample_id`), the two speakers kept as
  named roles.

Every message carries a key (`source`), and the store keeps a key once per user: a message whose key is
stored is skipped. The key chains the user's messages in the file, "c1:" and 32 hex digits of
key(n) = sha256(key(n-1), message n), where key(-1) is the user id and a message counts by its role, text,
time and session_id as the file gives them (a missing one as missing; no default, id or vector counts).
So a message is skipped only when its whole prefix in that user's history is the same as one already
stored, never for its file's name or folder, and never silently for being like another message:
- an import killed at any point and run again, a file imported twice or under another name, and a file
  appended to and imported again each store every message once;
- two files of one name in different folders are both stored, and so is every "ok" a history repeats
  (the repetitions' prefixes differ);
- two exports that begin with the same k messages of a user share those k.
A line that carries its own `source` (every line of an export does: the key the message was stored under)
keeps that key, so importing an export into the store it came from, or twice into another, stores nothing
twice, whatever the export filled in (`time`, `session_id`). A message whose key was forgotten (a forget or
a purge left its digest: lazymem/agent/store.py) is skipped and counted as forgotten: no import brings it
back. Each message also carries, as an alias, the key earlier versions gave it (`FILE_NAME:LINE`,
`FILE_NAME:HISTORY:INDEX`): rerunning such an import into a store they wrote adds nothing twice (in such a
store, another file of the same name still matches those keys, as it did then). Where a message is in
the file (file and line, or history and index) stays out of its key; error messages name it.

The import adds in batches (agent.limits.max_messages_per_add at most), each one transaction, and says
per user and in all how many messages were stored and how many were skipped as already stored. Retention
counts from the time of import (`added`), not from the messages' own `time`. Every failure is one line on
stderr that says what to do, with exit status 1 (2 for a malformed command line).

`--vectors` exports each message's embedding vectors too (lazymem/agent/vectors.py), and an import stores
those its own retrieval config would have made, so the user is not embedded again. Both commands therefore
compose the retrieval config (`retrieval=...` as the deployment has it; no model loads for that).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import logging
import sys
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from lazymem.agent.errors import AgentError, BadInput, StoreUnavailable, UnknownUser
from lazymem.data.schema import DataError

FORMATS = ("jsonl", "longmemeval", "locomo")
KEY_VERSION = "c1"  # a new rule for keys gets a new prefix, so that keys of two rules never meet
KEYED_FIELDS = ("role", "text", "time", "session_id")


@dataclass(frozen=True)
class UserHistory:
    """One user's messages from a source, each a dict for `Memory.import_` with its `source` key and
    `aliases`, and each message's place in the source (`positions[n]`, e.g. "day2/history.jsonl line 4")."""

    user_id: str
    messages: list[dict] = field(default_factory=list)
    positions: list[str] = field(default_factory=list)


def message_key(previous: str, message: Mapping) -> str:
    """The key of a message whose predecessor in its user's history has key `previous` (the user id for
    the first message), from its fields as the file gives them (see the module docstring)."""
    canonical = json.dumps([previous, *(message.get(k) for k in KEYED_FIELDS)], ensure_ascii=True)
    return f"{KEY_VERSION}:{hashlib.sha256(canonical.encode()).hexdigest()[:32]}"


def read_histories(path: str | Path, format: str, user_id: str | None = None) -> Iterator[UserHistory]:
    """The users of a file, in file order. Malformed input raises DataError naming file, record and field."""
    path = Path(path)
    if format == "jsonl":
        yield from _jsonl(path, user_id)
    elif format == "longmemeval":
        from lazymem.data import longmemeval

        for history in longmemeval.load(str(path)).histories.values():
            yield _from_history(path, history)
    elif format == "locomo":
        from lazymem.data import locomo
        from lazymem.data.io import read_json

        everything = list(range(len(read_json(path))))
        kinds = {c: str(c) for c in range(1, 6)}  # questions are not imported; their categories only parse
        for history in locomo.load(str(path), everything, tuple(kinds), kinds).histories.values():
            yield _from_history(path, history)
    else:
        raise ValueError(f"unknown import format {format!r}; expected one of {list(FORMATS)}")


def _from_history(path: Path, history) -> UserHistory:
    user = UserHistory(history.id)
    key = history.id
    for m in history.messages:
        message = {"role": m.role, "text": m.text, "time": m.time, "session_id": m.session_id}
        message["source"] = key = message_key(key, message)
        message["aliases"] = (f"{path.name}:{history.id}:{m.idx}",)
        user.messages.append(message)
        user.positions.append(f"{path} {history.id} message {m.idx}")
    return user


def _jsonl(path: Path, default_user: str | None) -> Iterator[UserHistory]:
    """Consecutive lines of one user form one history (an export writes each user's lines together); a
    user's key chain runs on across the whole file."""
    last_key: dict[str, str] = {}
    current: UserHistory | None = None
    offset = 0  # of the line in the file, in bytes
    with open(path, "rb") as f:
        for line_no, raw in enumerate(f, 1):
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError as e:
                problem = f"not UTF-8 text (byte {offset + e.start} of the file)"
                raise DataError(path, f"line {line_no}", None, problem) from None
            offset += len(raw)
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except ValueError as e:
                raise DataError(path, f"line {line_no}", None, f"not JSON ({e.msg})") from None
            except RecursionError:
                raise DataError(path, f"line {line_no}", None, "JSON nested too deep") from None
            if not isinstance(record, dict):
                raise DataError(path, f"line {line_no}", None, "expected a JSON object per line")
            user = record.get("user_id", default_user)
            if not isinstance(user, str) or not user:
                raise DataError(path, f"line {line_no}", "user_id", "missing (or pass --user)")
            # every field of the line goes on, so that the import refuses one it does not know (a misspelt
            # "session" or "timestamp" must not be dropped while the message is stored without it)
            message = dict(record)
            last_key[user] = message_key(last_key.get(user, user), message)
            if record.get("source") is None:  # an export's line keeps the key it was stored under
                message["source"] = last_key[user]
            message["aliases"] = (f"{path.name}:{line_no}",)
            if current is None or current.user_id != user:
                if current is not None:
                    yield current
                current = UserHistory(user)
            current.messages.append(message)
            current.positions.append(f"{path} line {line_no}")
    if current is not None:
        yield current


def export_lines(user_id: str, messages: Sequence[dict]) -> Iterator[str]:
    """An export as JSONL: one line per message, oldest first; what `read_histories(..., "jsonl")` reads."""
    for m in messages:
        yield json.dumps({"user_id": user_id, **m}, ensure_ascii=False)


class _Failed(Exception):
    """A failure of the command, as the one line it prints."""


class _Parser(argparse.ArgumentParser):
    def error(self, message: str):
        """A malformed command line in one line (argparse's own adds the usage)."""
        self.exit(2, f"{self.prog}: {message} (see {self.prog} --help)\n")


def main(command: str, argv: Sequence[str]) -> int:
    """`lazymem import ...` / `lazymem export ...` (see the module docstring); the exit status."""
    from lazymem.agent.memory import DEFAULT_TENANT

    parser = _Parser(prog=f"lazymem {command}")
    if command == "import":
        parser.add_argument("file")
        parser.add_argument("--format", choices=FORMATS, default="jsonl")
        parser.add_argument("--user", help="the user of jsonl lines without user_id")
    else:
        parser.add_argument("user")
        parser.add_argument("--vectors", action="store_true", help="with each message's embedding vectors")
    parser.add_argument("--tenant", default=DEFAULT_TENANT)
    args, overrides = parser.parse_known_args(argv)
    # a database that is down: the pool warns of every failed connection, then the store gives up
    logging.getLogger("psycopg.pool").setLevel(logging.ERROR)
    try:
        if command == "import":
            with open(args.file, "rb"):  # readable: checked before the config, which takes seconds
                pass
        with _open_memory(overrides) as memory:
            if command == "export":  # page by page: a user of any size in bounded memory
                for part in memory.export_pages(args.user, tenant=args.tenant, vectors=args.vectors):
                    for line in export_lines(args.user, part):
                        print(line)
            else:
                _import(memory, args)
    except _Failed as e:
        return _fail(command, str(e))
    except (AgentError, DataError, OSError) as e:
        return _fail(command, _explain(e))
    return 0


def _fail(command: str, reason: str) -> int:
    one_line = " ".join(part.strip() for part in reason.splitlines())  # a driver's error spans lines
    print(f"lazymem {command}: {one_line}", file=sys.stderr)
    return 1


def _open_memory(overrides: Sequence[str]):
    """The Memory the overrides configure, retrieval only: a retriever names the vectors, and no memory
    model is needed to store or read."""
    from lazymem.agent.memory import Memory
    from lazymem.agent.settings import one_line

    try:
        return Memory.from_config([*overrides, "method=rag"])
    except ValueError as e:  # ConfigError (an override, a value in agent.*) or a store's own check
        raise _Failed(f"bad configuration: {one_line(e)}") from None


def _import(memory, args: argparse.Namespace) -> None:
    from lazymem.agent.moving import Imported

    total = Imported()
    try:
        for history in read_histories(args.file, args.format, args.user):
            done = memory.import_(
                history.user_id,
                history.messages,
                tenant=args.tenant,
                progress=lambda n, user=history.user_id: print(f"{user}: {n} messages", file=sys.stderr),
                where=history.positions.__getitem__,
            )
            print(f"{history.user_id}: imported {_counts(done)}", file=sys.stderr)
            total += done
    except BadInput as e:  # names the message, its field, and what this user's import stored before it
        earlier = f"; {total.stored} messages of the users before it were stored too" if total.stored else ""
        raise _Failed(f"{e}{earlier}; fix it and run the import again (what is stored is skipped)") from None
    except DataError as e:  # the file's users before it are stored
        stored = total.stored
        before = f"{stored} messages of the users before it were stored" if stored else "nothing was stored"
        raise _Failed(f"{_explain(e)} ({before})") from None
    print(f"imported {_counts(total, f' from {args.file}')}", file=sys.stderr)


def _counts(done, source: str = "") -> str:
    """`done` (an Imported) as the import command says it; forgotten messages only when there are some."""
    forgotten = f", {done.forgotten} forgotten" if done.forgotten else ""
    return f"{done.total} messages{source} ({done.stored} stored, {done.skipped} already stored{forgotten})"


def _explain(e: AgentError | DataError | OSError) -> str:
    """The error's line, with what to do about it."""
    if isinstance(e, StoreUnavailable):
        return f"{e}; check agent.store.dsn and that the database is up, then run the command again"
    if isinstance(e, UnknownUser):
        return f"{e}; check the user id and --tenant"
    if isinstance(e, DataError):
        return f"{e}; fix the file (or name its --format) and run the import again"
    if isinstance(e, FileNotFoundError):
        return f"no such file: {e.filename}; check the path"
    if isinstance(e, IsADirectoryError):
        return f"{e.filename} is a folder; pass one file in it"
    if isinstance(e, PermissionError):
        return f"cannot read {e.filename}: permission denied; check its permissions"
    if isinstance(e, OSError):
        return f"{e.filename or 'I/O error'}: {e.strerror or e}"
    return str(e)
