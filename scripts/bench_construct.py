"""Benchmark the memory-construction stage on CPU with the bundled model (not a test).

For a sample of (question, window) pairs from a benchmark file it reports, per configuration:
  - the strict gate format rate, how many replies were salvaged, and action accuracy against gold
    (gold messages should be KEPT, the others DROPPED; accuracy over the first reply's decisions);
  - wall time with all windows of a question in flight at once vs strictly one after another, and the
    share of wall time spent outside model calls.
The LLM cache is off, so every number is a real model call.

    python scripts/bench_construct.py --data locomo --path ../shared/data/locomo_dev8.json --windows 12
"""

from __future__ import annotations

import argparse
import asyncio
import random
import time
from collections import Counter

from omegaconf import OmegaConf

from lazymem.conf import CONF_DIR
from lazymem.construct.decisions import check_decisions, salvage_decisions
from lazymem.construct.processor import InvalidPolicy, MemoryProcessor
from lazymem.construct.windows import build_windows
from lazymem.data import locomo, longmemeval, synthetic
from lazymem.data.schema import query_time
from lazymem.llm.llm_set import build_llms
from lazymem.prompts import load
from lazymem.retrieval.bm25 import BM25Retriever
from lazymem.retrieval.hybrid import HybridRetriever

# the category names the project configures (conf/data/locomo.yaml), not a second copy
NAMES = OmegaConf.load(CONF_DIR / "data" / "locomo.yaml").loader.category_names


def sample_windows(args):
    if args.data == "locomo":
        ds = locomo.load(args.path, category_names=NAMES)
    elif args.data == "longmemeval":
        ds = longmemeval.load(args.path)
    else:
        ds = synthetic.load(per_type=2, abstention=0)
    retriever = HybridRetriever({"bm25": BM25Retriever()}, n=args.n)
    rng = random.Random(args.seed)
    questions = [q for q in ds.questions if q.gold_idx]
    rng.shuffle(questions)
    picked = []  # (question, history, windows of that question), gold-bearing windows first
    for q in questions:
        h = ds.history(q)
        windows = build_windows(retriever.search(h, q.text).indices, len(h.messages), args.w)
        gold_windows = [w for w in windows if set(q.gold_idx) & set(w.idx)]
        other = [w for w in windows if w not in gold_windows]
        chosen = (gold_windows + other)[: args.per_question]
        picked.append((q, h, chosen))
        if sum(len(c) for _, _, c in picked) >= args.windows:
            break
    return picked


def llm_config(structured: bool, concurrency: int):
    return {
        "cache": False,
        "model_cache_dir": ".cache/models",
        "common": {
            "backend": "llamacpp",
            "model": "bundled:qwen2.5-0.5b",
            "served_name": "qwen2.5-0.5b",
            "concurrency": concurrency,
            "timeout_s": 600,
            "max_retries": 1,
            "structured": structured,
            "decoding": {"temperature": 0.0, "max_tokens": 1024, "seed": 0},
            "llamacpp": {"n_ctx": 4096, "n_threads": 2},
        },
        "roles": {"memory": {}},
    }


async def run_config(picked, structured: bool, parallel: bool, log_dir: str):
    cfg = llm_config(structured, concurrency=8 if parallel else 1)
    stats = {
        "windows": 0,
        "gate_ok": 0,
        "salvaged": 0,
        "correct": 0,
        "decisions": 0,
        "model_s": 0.0,
        "errors": Counter(),
    }
    outputs = []
    with build_llms(cfg, log_dir) as llms:
        proc = MemoryProcessor(
            llms["memory"],
            load("memory_system"),
            load("memory_user"),
            InvalidPolicy(salvage=False, retries=0, fallback="drop"),
        )
        await proc.process("warm up", "now", picked[0][2][:1], picked[0][1].messages)  # load weights
        t0 = time.perf_counter()
        for q, h, windows in picked:
            if parallel:
                results = await proc.process(q.text, query_time(q, h), windows, h.messages)
            else:
                results = [
                    (await proc.process(q.text, query_time(q, h), [w], h.messages))[0] for w in windows
                ]
            for r in results:
                stats["windows"] += 1
                stats["model_s"] += r.latency_s
                gate = check_decisions(r.raw, len(r.window))
                stats["gate_ok"] += gate.ok
                stats["errors"][gate.error] += not gate.ok
                salvaged = salvage_decisions(r.raw, len(r.window))
                stats["salvaged"] += (not gate.ok) and salvaged.ok
                if salvaged.ok:
                    for i, d in zip(r.window.idx, salvaged.decisions, strict=True):
                        stats["decisions"] += 1
                        stats["correct"] += (d.op == "KEEP") == (i in q.gold_idx)
                outputs.append(r.raw)
        stats["wall_s"] = time.perf_counter() - t0
    return stats, outputs


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", default="synthetic", choices=["synthetic", "locomo", "longmemeval"])
    ap.add_argument("--path", default=None)
    ap.add_argument("--windows", type=int, default=12, help="windows in the sample")
    ap.add_argument("--per-question", type=int, default=3)
    ap.add_argument("--n", type=int, default=10, help="retrieval depth (BM25)")
    ap.add_argument("--w", type=int, default=2, help="window radius")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    picked = sample_windows(args)
    n_windows = sum(len(w) for _, _, w in picked)
    print(
        f"{args.data}: {n_windows} windows from {len(picked)} questions "
        f"({sum(len(w) for _, _, ws in picked for w in ws) / n_windows:.1f} messages per window)\n"
    )
    rows = {}
    for name, structured, parallel in [
        ("free text, parallel", False, True),
        ("structured, parallel", True, True),
        ("structured, sequential", True, False),
    ]:
        stats, outputs = asyncio.run(run_config(picked, structured, parallel, f"/tmp/bench_construct/{name}"))
        rows[name] = (stats, outputs)
        s = stats
        print(
            f"{name:24s} gate {s['gate_ok']}/{s['windows']} ({s['gate_ok'] / s['windows']:.0%}), "
            f"+salvaged {s['salvaged']}, action accuracy "
            f"{s['correct'] / s['decisions'] if s['decisions'] else float('nan'):.3f} over {s['decisions']} "
            f"decisions, wall {s['wall_s']:.1f} s ({s['wall_s'] / s['windows']:.1f} s/window), "
            f"gate errors {dict(+s['errors'])}"
        )
        if not parallel:  # in parallel runs call latencies include queueing, so the share means nothing
            print(
                f"{'':24s} wall time outside model calls: {s['wall_s'] - s['model_s']:.2f} s "
                f"({1 - s['model_s'] / s['wall_s']:.2%})"
            )
    par, seq = rows["structured, parallel"], rows["structured, sequential"]
    same = sum(a == b for a, b in zip(par[1], seq[1], strict=True))
    print(
        f"\nparallel vs sequential (structured): speedup {seq[0]['wall_s'] / par[0]['wall_s']:.2f}x, "
        f"identical outputs {same}/{len(par[1])}"
    )


if __name__ == "__main__":
    main()
