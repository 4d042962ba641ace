"""Benchmark the retrieval presets on a LongMemEval-S history (~500 messages). Not a test.

For each preset (hybrid, bm25, dense) and BM25 backend it reports: model load time, the cold index
build (empty embedding cache), the warm rebuild by a fresh retriever over the same cache (the second run
of an experiment) and its speedup, in-memory reuse, and per-query latency p50/p95 per stage over the
sample's questions asked `--repeats` times against that history. `--recall` adds gold-message recall
at n and All@n over every sample question on its own history (builds all 8 histories).

    .venv/bin/python scripts/bench_retrieval.py [--data PATH] [--history 0] [--repeats 5] [--recall]
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

import numpy as np
from hydra import compose, initialize_config_dir
from hydra.utils import instantiate

from lazymem.conf import CONF_DIR
from lazymem.data.schema import History, Message

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT.parent / "shared" / "data" / "longmemeval_s_sample8.json"
# (label, preset, bm25 backend or None)
ROWS = [
    ("hybrid / bm25s", "hybrid", "bm25s"),
    ("hybrid / rank_bm25", "hybrid", "rank_bm25"),
    ("bm25 / bm25s", "bm25", "bm25s"),
    ("bm25 / rank_bm25", "bm25", "rank_bm25"),
    ("dense", "dense", None),
]
STAGES = ("bm25", "dense", "fusion", "total")


def load_items(path: Path) -> list[dict]:
    return json.loads(path.read_text())


def history_of(item: dict) -> History:
    """Sessions in date order (the file's order is not always chronological), messages verbatim."""
    sessions = zip(
        item["haystack_dates"], item["haystack_session_ids"], item["haystack_sessions"], strict=True
    )
    ordered = sorted(sessions, key=lambda s: s[0][:10] + s[0][-5:])  # "2023/06/29 (Thu) 04:09"
    messages = []
    for date, sid, turns in ordered:
        for turn in turns:
            messages.append(
                Message(
                    len(messages),
                    sid,
                    date,
                    turn["role"],
                    turn["content"],
                    bool(turn.get("has_answer", False)),
                )
            )
    return History(item["question_id"], messages)


def make_retriever(preset: str, backend: str | None, cache_dir: str):
    overrides = [f"+retrieval={preset}"]
    if preset in ("hybrid", "dense"):
        overrides.append(f"retrieval.retrievers.dense.cache.dir={cache_dir}")
    if backend is not None:
        overrides.append(f"retrieval.retrievers.bm25.backend={backend}")
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base=None):
        return instantiate(compose(overrides=overrides).retrieval)


def load_models(retriever) -> float:
    dense = retriever.retrievers.get("dense")
    if dense is None:
        return 0.0
    t0 = time.perf_counter()
    dense.encoder.encode(["warm up"])
    return time.perf_counter() - t0


def bench_row(label, preset, backend, history, questions, repeats, workdir) -> dict:
    cache_dir = str(Path(workdir) / label.replace(" / ", "-"))
    cold = make_retriever(preset, backend, cache_dir)
    load_s = load_models(cold)
    index = cold.index(history)
    t0 = time.perf_counter()
    assert cold.index(history) is index
    reuse_s = time.perf_counter() - t0

    warm = make_retriever(preset, backend, cache_dir)  # a new run: same disk cache, empty memory
    warm_load_s = load_models(warm)
    warm_index = warm.index(history)

    warm_index.search(questions[0])  # first-query effects (lazy imports, allocator) stay out of the numbers
    per_stage: dict[str, list[float]] = {s: [] for s in STAGES}
    for _ in range(repeats):
        for q in questions:
            timings = warm_index.search(q).timings
            for s in STAGES:
                per_stage[s].append(timings[s])
    return {
        "label": label,
        "load_s": max(load_s, warm_load_s),
        "cold_s": index.build_seconds,
        "cold_parts": index.build_timings,
        "cold_embedded": index.embedded,
        "warm_s": warm_index.build_seconds,
        "warm_embedded": warm_index.embedded,
        "reuse_s": reuse_s,
        "lat": {s: (np.percentile(v, 50), np.percentile(v, 95)) for s, v in per_stage.items()},
        "queries": len(per_stage["total"]),
    }


def ms(x: float) -> str:
    return f"{x * 1000:9.2f}" if x >= 0.0005 or x == 0 else f"{x * 1000:9.3f}"


def print_tables(rows: list[dict], history: History) -> None:
    print(
        f"\nHistory {history.id}: {len(history.messages)} messages, "
        f"{sum(len(m.text) for m in history.messages) // len(history.messages)} chars/message on average"
    )
    print("\nIndex build (seconds; cold = empty embedding cache, warm = fresh retriever, cache filled)")
    head = (
        f"{'preset / backend':<20}{'load':>8}{'cold':>9}{'bm25':>8}{'dense':>9}{'embedded':>10}"
        f"{'warm':>9}{'embedded':>10}{'cold/warm':>11}{'reuse ms':>10}"
    )
    print(head)
    print("-" * len(head))
    for r in rows:
        parts = r["cold_parts"]
        speedup = r["cold_s"] / r["warm_s"] if r["warm_s"] > 0 else float("inf")
        print(
            f"{r['label']:<20}{r['load_s']:8.2f}{r['cold_s']:9.3f}{parts.get('bm25', 0):8.3f}"
            f"{parts.get('dense', 0):9.3f}{r['cold_embedded']:10d}{r['warm_s']:9.3f}"
            f"{r['warm_embedded']:10d}{speedup:10.1f}x{r['reuse_s'] * 1000:10.3f}"
        )

    print(f"\nPer-query latency (milliseconds, p50 / p95 over {rows[0]['queries']} queries)")
    head = f"{'preset / backend':<20}" + "".join(f"{s + ' p50':>11}{s + ' p95':>11}" for s in STAGES)
    print(head)
    print("-" * len(head))
    for r in rows:
        cells = "".join(f"{ms(r['lat'][s][0]):>11}{ms(r['lat'][s][1]):>11}" for s in STAGES)
        print(f"{r['label']:<20}{cells}")

    by = {r["label"]: r for r in rows}
    print("\nRatios")
    for preset in ("bm25", "hybrid"):
        fast, slow = by[f"{preset} / bm25s"], by[f"{preset} / rank_bm25"]
        q = slow["lat"]["bm25"][0] / fast["lat"]["bm25"][0]
        b = slow["cold_parts"]["bm25"] / fast["cold_parts"]["bm25"]
        print(
            f"  {preset}: bm25 stage p50, rank_bm25 / bm25s = {q:.1f}x; "
            f"bm25 build, rank_bm25 / bm25s = {b:.1f}x"
        )
    h = by["hybrid / bm25s"]
    share = h["lat"]["dense"][0] / h["lat"]["total"][0]
    print(f"  hybrid / bm25s: dense stage (query encoding + cosine) is {share:.0%} of the p50 query time")
    print(f"  hybrid / bm25s: warm rebuild is {h['cold_s'] / h['warm_s']:.1f}x faster than the cold build")


def recall_table(items: list[dict], n: int, workdir: str) -> None:
    """Gold-message recall at n and All@n (every gold message retrieved), before window expansion."""
    print(
        f"\nGold coverage at n={n} over {len(items)} questions, each on its own history "
        "(questions without gold messages skipped)"
    )
    print(f"{'preset / backend':<20}{'recall@n':>10}{'All@n':>8}{'questions':>11}")
    cache_dir = str(Path(workdir) / "recall")
    for label, preset, backend in ROWS:
        retriever = make_retriever(preset, backend, cache_dir)
        hits = total = full = asked = 0
        for item in items:
            history = history_of(item)
            gold = {m.idx for m in history.messages if m.gold}
            if not gold:
                continue
            got = set(retriever.index(history).search(item["question"], n).indices)
            hits += len(gold & got)
            total += len(gold)
            full += gold <= got
            asked += 1
        print(f"{label:<20}{hits / total:10.3f}{full / asked:8.3f}{asked:11d}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, default=DATA)
    parser.add_argument("--history", type=int, default=0, help="which item's haystack to index")
    parser.add_argument("--repeats", type=int, default=5, help="times each question is asked")
    parser.add_argument("--recall", action="store_true", help="also measure gold coverage on all items")
    args = parser.parse_args()

    items = load_items(args.data)
    history = history_of(items[args.history])
    questions = [item["question"] for item in items]
    with tempfile.TemporaryDirectory(prefix="lazymem-bench-") as workdir:
        rows = [
            bench_row(label, preset, backend, history, questions, args.repeats, workdir)
            for label, preset, backend in ROWS
        ]
        print_tables(rows, history)
        if args.recall:
            recall_table(items, 50, workdir)


if __name__ == "__main__":
    main()
