"""Moving one user to another store, with and without their vectors (a benchmark, not a test).

    .venv/bin/python scripts/bench_transfer.py --source agent.store.kind=postgres agent.store.dsn=DSN \
        --target agent.store.kind=sqlite --user big [--without] [--out F.json]

`--source` and `--target` are `Memory.from_config` overrides naming the two stores; the user must be indexed
in the source (scripts/bench_agent_scale.py leaves its user so). The target's store must be empty: a
PostgreSQL one is emptied first, a SQLite one lives in a temporary folder. What is timed, through the same
calls as `lazymem export --vectors` and `lazymem import`:
- the export with vectors, written as JSONL (seconds, megabytes);
- loading the encoder (once per process, whatever follows) and the import (seconds);
- indexing the user in the target (`Memory.index_pending`: seconds, and how many message texts the encoder
  was given), and the first query after it;
- with --without, the same import from the file with the vectors left out, for comparison.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_agent_scale import empty_database  # noqa: E402

from lazymem import Memory  # noqa: E402
from lazymem.agent.transfer import export_lines, read_histories  # noqa: E402

QUESTION = "What did I say about my garden?"


def export(source: list[str], user: str, path: Path) -> dict:
    with Memory.from_config(["method=rag", *source]) as memory:
        t0 = time.perf_counter()
        messages = memory.export(user, vectors=True)
        with open(path, "w", encoding="utf-8") as f:
            for line in export_lines(user, messages):
                f.write(line + "\n")
        seconds = time.perf_counter() - t0
    carried = sum("vectors" in m for m in messages)
    return {
        "messages": len(messages),
        "with_vectors": carried,
        "export_s": seconds,
        "mb": path.stat().st_size / 2**20,
    }


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
        stored = memory.import_(history.user_id, history.messages, batch_size=1000)
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
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    figures: dict = {"source": args.source, "target": args.target}
    with tempfile.TemporaryDirectory() as tmp:
        dump = Path(tmp) / "user.jsonl"
        figures["export"] = export([f"agent.dir={tmp}/source", *args.source], args.user, dump)
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
