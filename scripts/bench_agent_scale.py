"""Agent memory at scale (a benchmark, not a test): one user with many messages, through `Memory` in-process.

    .venv/bin/python scripts/bench_agent_scale.py --messages 10000 --store sqlite
    .venv/bin/python scripts/bench_agent_scale.py --messages 10000 --store postgres --dsn postgresql://...

Per run, on a fresh store in a temporary folder (or the database at --dsn, emptied first):
- add throughput: the history in batches of --batch (100) messages, through `Memory.add`;
- indexing: the time from the last add until the user is fully indexed (`Memory.index_pending`, what the
  service's background indexer runs), and the embedding rate;
- the first query after indexing (it still builds the in-memory indexes from the stored vectors), then
  --queries warm queries: p50 / p95, with `method=rag` and with `method=extractive_gate`, and 10 queries
  each right after an add of one message (an agent's turn: the indexes grow first);
- the maintenance step after a forget (on PostgreSQL: VACUUM FULL and a checkpoint) and the database size;
- with --mem0 N: Mem0 (mem0ai, embedded Qdrant, the same encoder, `infer=False`) on the first N messages:
  adds per second (it embeds as it adds) and search p50 / p95 with the top 50;
- resident memory of the process before the user is opened (after indexing) and after its first query
  (memory per open user);
- for comparison, the first query of the same history without write-time indexing (what every query of a
  new user paid before): --cold.

The history: the LongMemEval sample's and the synthetic generator's turns, cycled with a counter so that
every text is distinct (each one is embedded; throughput needs no meaning). Prints the figures as JSON;
--out FILE keeps them, saved as the run goes, and --resume goes on from there after a kill (the adds from
what is stored, the indexing from what is pending).
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import dataclasses
import gc
import json
import shutil
import statistics
import tempfile
import threading
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
    """Resident memory after a garbage collection, with freed heap pages handed back (glibc's malloc_trim):
    what is held, not the high-water mark of a build's temporaries."""
    gc.collect()
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL("libc.so.6").malloc_trim(0)
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
        out += ["agent/store=postgres", f"agent.store.dsn={args.dsn}"]
        # a first query before blocks read 100,000 rows: longer than the service default of 3 s under load
        out.append("agent.store.wait_s=60")
    return out


class Figures(dict):
    """The run's figures, saved to --out after every phase and, during a long phase, every 10 seconds with
    the time spent so far: a run killed and started again with --resume goes on where it stopped."""

    def __init__(self, out: Path | None, resume: bool, **start):
        super().__init__(json.loads(out.read_text()) if resume and out and out.exists() else start)
        self.out = out

    def save(self) -> None:
        if self.out:
            self.out.parent.mkdir(parents=True, exist_ok=True)
            self.out.write_text(json.dumps(self, indent=1))

    def timed(self, name: str, work) -> float:
        """Run `work`, adding its seconds to `name_s` (kept across resumed runs)."""
        earlier = self.get(f"{name}_s_so_far", 0.0)
        t0 = time.perf_counter()
        stop = threading.Event()

        def beat() -> None:
            while not stop.wait(10):
                self[f"{name}_s_so_far"] = earlier + time.perf_counter() - t0
                self.save()

        threading.Thread(target=beat, daemon=True).start()
        try:
            work()
        finally:
            stop.set()
        self[f"{name}_s"] = earlier + time.perf_counter() - t0
        self.pop(f"{name}_s_so_far", None)
        self.save()
        return self[f"{name}_s"]


def query_times(memory, user: str, n: int) -> dict:
    times = []
    for k in range(n):
        t0 = time.perf_counter()
        memory.query(user, QUESTIONS[k % len(QUESTIONS)])
        times.append(time.perf_counter() - t0)
    return percentiles(times)


def run(args) -> dict:
    from lazymem import Memory

    history = turns(args.messages)
    figures = Figures(args.out, args.resume, store=args.store, messages=args.messages)
    tmp = args.dir or Path(tempfile.mkdtemp(prefix="lazymem-scale-"))
    try:
        if args.store == "postgres" and not args.resume:
            empty_database(args.dsn)
        if args.store == "postgres" and args.resume:
            release_claims(args.dsn)  # the killed run's claim would otherwise wait out its lease
        with Memory.from_config(overrides(args, tmp / "a", "rag")) as memory:
            memory.add("warm-up", history[:5])  # loads the encoder and reranker before anything is timed
            memory.query("warm-up", QUESTIONS[0])
            if args.from_export and "import_s" not in figures:
                # the history and its vectors from `lazymem export --vectors`: embedding is not measured again
                done = []
                figures.timed("import", lambda: done.append(memory.import_("big", exported(args))))
                figures["imported"] = dataclasses.asdict(done[0])
            elif "add_s" not in figures and not args.from_export:
                stored = stored_count(memory, "big")  # batches are whole: a resumed run goes on from here

                def add() -> None:
                    for start in range(stored, len(history), args.batch):
                        memory.add("big", history[start : start + args.batch])

                figures["add_msgs_per_s"] = len(history) / figures.timed("add", add)
            if "index_s" not in figures:
                index_s = figures.timed("index", memory.index_pending)
                figures["embedded_per_s"] = len(history) / index_s
            before = rss_mb()  # models loaded, vectors stored, no index built yet: what grows
            # from here is the user's indexes
            t0 = time.perf_counter()
            memory.query("big", QUESTIONS[0])
            figures["first_query_after_index_s"] = time.perf_counter() - t0
            figures["rag"] = query_times(memory, "big", args.queries)
            figures["rss_per_open_user_mb"] = rss_mb() - before
            times = []
            for k in range(10):  # an agent's turn: add a message, then query (its indexes grow)
                memory.add("big", [{"role": "user", "text": f"A new note, number {k}, about my garden."}])
                t0 = time.perf_counter()
                memory.query("big", QUESTIONS[k % len(QUESTIONS)])
                times.append(time.perf_counter() - t0)
            figures["rag_after_add"] = percentiles(times)
            figures.save()
            # the maintenance step after a forget (on PostgreSQL: VACUUM FULL of the tables, a checkpoint)
            memory.forget_all("warm-up")
            t0 = time.perf_counter()
            memory.maintain()
            figures["maintain_s"] = time.perf_counter() - t0
            if args.store == "postgres":
                figures["database_mb"] = database_mb(args.dsn)
            figures.save()
        with Memory.from_config(overrides(args, tmp / "a", "extractive_gate")) as memory:
            memory.query("big", QUESTIONS[0])  # a new Memory: indexes rebuilt from the stored vectors
            figures["extractive_gate"] = query_times(memory, "big", args.queries)
            figures.save()
            if args.mem0:
                figures["mem0"] = mem0_figures(memory, history[: args.mem0], tmp / "mem0", args)
                figures.save()
        if args.cold:
            if args.store == "postgres":
                empty_database(args.dsn)
            with Memory.from_config(overrides(args, tmp / "c", "rag")) as memory:
                for start in range(0, len(history), args.batch):
                    memory.add("cold", history[start : start + args.batch])
                t0 = time.perf_counter()
                memory.query("cold", QUESTIONS[0])
                figures["first_query_without_indexing_s"] = time.perf_counter() - t0
                figures.save()
    finally:
        if args.dir is None:
            shutil.rmtree(tmp, ignore_errors=True)
    return figures


def mem0_figures(memory, history: list[dict], dir: Path, args) -> dict:
    """Mem0 (mem0ai) on the same messages: embedded Qdrant, the same dense encoder (lazymem's Mem0 adapter),
    every message stored as it is (`infer=False`: no LLM), then `search` with the top 50. The adds are in
    batches of --batch messages, one `Memory.add` each, as ours."""
    from lazymem.methods.mem0_store import DenseEmbedder, StoreSpec, close_memory, import_mem0, open_memory

    main = import_mem0(dir / "home")
    spec = StoreSpec(dir, None, args.batch, None, {})
    m0 = open_memory(main, dir, spec, "scale", llm=None, embedder=DenseEmbedder(memory.retriever.dense()))
    try:
        t0 = time.perf_counter()
        for start in range(0, len(history), args.batch):
            batch = [{"role": m["role"], "content": m["text"]} for m in history[start : start + args.batch]]
            m0.add(batch, user_id="big", infer=False)
        add_s = time.perf_counter() - t0
        stored = len(m0.get_all(filters={"user_id": "big"}, top_k=len(history) + 1)["results"])
        times = []
        for k in range(args.queries):
            t0 = time.perf_counter()
            m0.search(QUESTIONS[k % len(QUESTIONS)], top_k=50, threshold=0.0, filters={"user_id": "big"})
            times.append(time.perf_counter() - t0)
    finally:
        close_memory(m0)
    return {
        "messages": len(history),
        "stored": stored,
        "add_s": add_s,
        "add_msgs_per_s": len(history) / add_s,
        "search": percentiles(times),
    }


def exported(args):
    """The first --messages messages of the --from-export NDJSON file, as an import reads them."""
    with args.from_export.open(encoding="utf-8") as lines:
        for n, line in enumerate(lines):
            if n == args.messages:
                return
            yield json.loads(line)


def stored_count(memory, user: str) -> int:
    from lazymem.agent.store import UnknownUser

    try:
        return len(memory.export(user))
    except UnknownUser:
        return 0


def release_claims(dsn: str) -> None:
    import psycopg

    with psycopg.connect(dsn, autocommit=True) as conn:
        if conn.execute("SELECT to_regclass('pending')").fetchone()[0]:
            conn.execute("UPDATE pending SET claimed_until = 0")


def database_mb(dsn: str) -> float:
    import psycopg

    with psycopg.connect(dsn, autocommit=True) as conn:
        return conn.execute("SELECT pg_database_size(current_database())").fetchone()[0] / 2**20


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--messages", type=int, default=10_000)
    parser.add_argument("--store", choices=("sqlite", "postgres"), default="sqlite")
    parser.add_argument("--dsn", help="the PostgreSQL database of --store postgres (its tables are dropped)")
    parser.add_argument("--batch", type=int, default=100)
    parser.add_argument("--queries", type=int, default=40)
    parser.add_argument("--cold", action="store_true", help="also time a first query without indexing")
    parser.add_argument("--out", type=Path, help="the figures as JSON, saved as the run goes")
    parser.add_argument("--dir", type=Path, help="the Memory folder (kept; default: a temporary one)")
    parser.add_argument(
        "--resume", action="store_true", help="go on from --out and the kept store (--dir, or the database)"
    )
    parser.add_argument(
        "--from-export", type=Path, help="import the history and its vectors from this NDJSON export instead"
    )
    parser.add_argument("--mem0", type=int, default=0, help="also time Mem0 on the first N messages")
    args = parser.parse_args()
    if args.store == "postgres" and not args.dsn:
        parser.error("--store postgres needs --dsn")
    if args.resume and not (args.out and (args.store == "postgres" or args.dir)):
        parser.error("--resume needs --out, and --dir with --store sqlite")
    print(json.dumps(run(args), indent=1))


if __name__ == "__main__":
    main()
