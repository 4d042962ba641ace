"""Agent memory at scale (a benchmark, not a test): one user with many messages, through `Memory` in-process.

    .venv/bin/python scripts/bench_agent_scale.py --messages 10000 --store sqlite
    .venv/bin/python scripts/bench_agent_scale.py --messages 10000 --store postgres --dsn postgresql://...

Per run, on a fresh store in a temporary folder (or the database at --dsn, emptied first):
- add throughput: the history in batches of --batch (100) messages, through `Memory.add`;
- indexing: the time from the last add until the user is fully indexed (`Memory.index_pending`, what the
  service's background indexer runs), and the embedding rate;
- the first query after indexing (it still builds the in-memory indexes from the stored vectors), then
  --queries warm queries: p50 / p95, with `method=rag` and with `method=extractive_gate`;
- resident memory of the process before the user is opened (after indexing) and after its first query
  (memory per open user);
- for comparison, the first query of the same history without write-time indexing (what every query of a
  new user paid before): --cold.

The history: the LongMemEval sample's and the synthetic generator's turns, cycled with a counter so that
every text is distinct (each one is embedded; throughput needs no meaning). Prints a JSON line per figure
and a table at the end; --out FILE keeps the JSON.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SHARED = ROOT.parent / "shared" / "data" / "longmemeval_s_sample8.json"
QUESTIONS = ["What did I say about my dog?", "When is the concert?", "Where did I travel?", "What do I cook?"]


def turns(n: int) -> list[dict]:
    """`n` messages from the LongMemEval sample (if present) and the synthetic generator, made distinct."""
    from lazymem.data import synthetic

    texts = [m.text for h in synthetic.load(per_type=4).histories.values() for m in h.messages]
    if SHARED.exists():
        records = json.loads(SHARED.read_text())
        texts += [t["content"][:400] for r in records[:2] for s in r["haystack_sessions"] for t in s]
    roles = ("user", "assistant")
    return [
        {"role": roles[k % 2], "text": f"{texts[k % len(texts)]} (#{k})", "session_id": f"s{k // 50}"}
        for k in range(n)
    ]


def rss_mb() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def percentiles(xs: list[float]) -> dict:
    xs = sorted(xs)
    p95 = xs[min(len(xs) - 1, int(0.95 * len(xs)))]
    return {"p50_ms": 1000 * statistics.median(xs), "p95_ms": 1000 * p95}


def empty_database(dsn: str) -> None:
    import psycopg

    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("DROP SCHEMA public CASCADE")
        conn.execute("CREATE SCHEMA public")


def overrides(args, dir: Path, method: str) -> list[str]:
    out = [f"method={method}", f"agent.dir={dir}", f"paths.cache={dir / 'cache'}"]
    if args.store == "postgres":
        out += ["agent.store.kind=postgres", f"agent.store.dsn={args.dsn}"]
    return out


def run(args) -> dict:
    from lazymem import Memory

    history = turns(args.messages)
    figures: dict = {"store": args.store, "messages": args.messages}
    tmp = Path(tempfile.mkdtemp(prefix="lazymem-scale-"))
    try:
        if args.store == "postgres":
            empty_database(args.dsn)
        with Memory.from_config(overrides(args, tmp / "a", "rag")) as memory:
            memory.add("warm-up", history[:5])  # loads the encoder and reranker before anything is timed
            memory.query("warm-up", QUESTIONS[0])
            t0 = time.perf_counter()
            for start in range(0, len(history), args.batch):
                memory.add("big", history[start : start + args.batch])
            add_s = time.perf_counter() - t0
            figures["add_msgs_per_s"] = len(history) / add_s
            t0 = time.perf_counter()
            memory.index_pending()
            index_s = time.perf_counter() - t0
            figures |= {"index_s": index_s, "embedded_per_s": len(history) / index_s}
            before = rss_mb()  # models loaded, vectors stored, no index built yet: what grows
            # from here is the user's indexes
            t0 = time.perf_counter()
            memory.query("big", QUESTIONS[0])
            figures["first_query_after_index_s"] = time.perf_counter() - t0
            times = []
            for k in range(args.queries):
                t0 = time.perf_counter()
                memory.query("big", QUESTIONS[k % len(QUESTIONS)])
                times.append(time.perf_counter() - t0)
            figures["rag"] = percentiles(times)
            figures["rss_per_open_user_mb"] = rss_mb() - before
        with Memory.from_config(overrides(args, tmp / "a", "extractive_gate")) as memory:
            memory.query("big", QUESTIONS[0])  # a new Memory: indexes rebuilt from the stored vectors
            times = []
            for k in range(args.queries):
                t0 = time.perf_counter()
                memory.query("big", QUESTIONS[k % len(QUESTIONS)])
                times.append(time.perf_counter() - t0)
            figures["extractive_gate"] = percentiles(times)
        if args.cold:
            if args.store == "postgres":
                empty_database(args.dsn)
            with Memory.from_config(overrides(args, tmp / "c", "rag")) as memory:
                for start in range(0, len(history), args.batch):
                    memory.add("cold", history[start : start + args.batch])
                t0 = time.perf_counter()
                memory.query("cold", QUESTIONS[0])
                figures["first_query_without_indexing_s"] = time.perf_counter() - t0
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--messages", type=int, default=10_000)
    parser.add_argument("--store", choices=("sqlite", "postgres"), default="sqlite")
    parser.add_argument("--dsn", help="the PostgreSQL database of --store postgres (its tables are dropped)")
    parser.add_argument("--batch", type=int, default=100)
    parser.add_argument("--queries", type=int, default=40)
    parser.add_argument("--cold", action="store_true", help="also time a first query without indexing")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    if args.store == "postgres" and not args.dsn:
        parser.error("--store postgres needs --dsn")
    figures = run(args)
    print(json.dumps(figures, indent=1))
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(figures, indent=1))


if __name__ == "__main__":
    main()
