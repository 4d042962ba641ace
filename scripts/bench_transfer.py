"""Moving one user to another store, with and without their vectors (a benchmark, not a test).

    .venv/bin/python scripts/bench_transfer.py --source agent/store=postgres agent.store.dsn=DSN \
        --target agent/store=sqlite --user big [--without] [--json-reply] [--out F.json]

`--source` and `--target` are `Memory.from_config` overrides naming the two stores; the user must be indexed
in the source (scripts/bench_agent_scale.py leaves its user so). The target's store must be empty: a
PostgreSQL one is emptied first, a SQLite one lives in a temporary folder. What is timed, through the same
calls as `lazymem export --vectors` and `lazymem import`:
- the export with vectors, read page by page and written as JSONL (seconds, megabytes, how much it grew
  the process's peak memory); with --json-reply also the service's JSON reply for the same user;
- loading the encoder (once per process, whatever follows) and the import (seconds);
- indexing the user in the target (`Memory.index_pending`: seconds, and how many message texts the encoder
  was given), and the first query after it;
- with --without, the same import from the file with the vectors left out, for comparison.
"""

from __future__ import annotations

import argparse
import json
import resource
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_agent_scale import empty_database  # noqa: E402

from lazymem import Memory  # noqa: E402
from lazymem.agent.transfer import export_lines, read_histories  # noqa: E402

QUESTION = "What did I say about my garden?"


def export(source: list[str], user: str, path: Path, json_reply: bool) -> dict:
    """The export as `lazymem export --vectors` makes it (page by page), and with `json_reply` the service's
    JSON reply built for the same user (`?format=json`): seconds and how much each grew the process."""
    with Memory.from_config(["method=rag", *source]) as memory:
        before = peak_mb()
        t0 = time.perf_counter()
        messages = carried = 0
        with open(path, "w", encoding="utf-8") as f:
            for part in memory.export_pages(user, vectors=True):
                messages += len(part)
                carried += sum("vectors" in m for m in part)
                f.write("".join(line + "\n" for line in export_lines(user, part)))
        figures = {
            "messages": messages,
            "with_vectors": carried,
            "export_s": time.perf_counter() - t0,
            "export_peak_growth_mb": peak_mb() - before,
            "mb": path.stat().st_size / 2**20,
        }
        if json_reply:
            from lazymem.agent.routes import ExportReply

            before = peak_mb()
            t0 = time.perf_counter()
            reply = ExportReply(user_id=user, messages=memory.export(user, vectors=True))
            body = reply.model_dump_json(exclude_none=True)
            figures["json_reply_s"] = time.perf_counter() - t0
            figures["json_reply_peak_growth_mb"] = peak_mb() - before
            del reply, body
    return figures


def peak_mb() -> float:
    """The process's peak resident memory so far (it only grows: measure a phase by the growth)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def move(target: list[str], path: Path, vectors: bool) -> dict:
    """Import `path` into the target (without the vectors unless `vectors`), index, ask once."""
    dsn = next((o.split("=", 1)[1] for o in target if o.startswith("agent.store.dsn=")), None)
    if dsn:
        empty_database(dsn)
    with (
        tempfile.TemporaryDirectory() as dir,
        Memory.from_config(["method=rag", f"agent.dir={dir}", *target]) as memory,
    ):
        encoder = memory.retriever.retrievers["dense"].encoder
        real_encode, encoded = encoder.encode, []

        def counting(texts):
            encoded.extend(texts)
            return real_encode(texts)

        encoder.encode = counting
        t0 = time.perf_counter()
        assert encoder.width > 0  # loads the encoder: once per process, whatever is imported or asked
        loaded = time.perf_counter() - t0
        (history,) = read_histories(path, "jsonl")
        if not vectors:
            for m in history.messages:
                m.pop("vectors", None)
        t0 = time.perf_counter()
        stored = memory.import_(history.user_id, history.messages, batch_size=1000).stored
        imported = time.perf_counter() - t0
        t0 = time.perf_counter()
        memory.index_pending()
        indexed = time.perf_counter() - t0
        t0 = time.perf_counter()
        memory.query(history.user_id, QUESTION)
        first = time.perf_counter() - t0
    return {
        "stored": stored,
        "encoder_load_s": loaded,
        "import_s": imported,
        "index_s": indexed,
        "texts_encoded": len(encoded) - 2,  # less the width probe and the question
        "first_query_s": first,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--source", nargs="+", required=True, help="overrides naming the source store")
    parser.add_argument("--target", nargs="+", required=True, help="overrides naming the target store")
    parser.add_argument("--user", required=True)
    parser.add_argument("--without", action="store_true", help="also import without the vectors")
    parser.add_argument(
        "--json-reply", action="store_true", help="also build the service's JSON export reply"
    )
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    figures: dict = {"source": args.source, "target": args.target}
    with tempfile.TemporaryDirectory() as tmp:
        dump = Path(tmp) / "user.jsonl"
        figures["export"] = export(
            [f"agent.dir={tmp}/source", *args.source], args.user, dump, args.json_reply
        )
        print(json.dumps(figures["export"]), flush=True)
        figures["with_vectors"] = move(args.target, dump, vectors=True)
        print(json.dumps(figures["with_vectors"]), flush=True)
        if args.without:
            figures["without_vectors"] = move(args.target, dump, vectors=False)
            print(json.dumps(figures["without_vectors"]), flush=True)
    if args.out:
        args.out.write_text(json.dumps(figures, indent=1))


if __name__ == "__main__":
    main()
