"""The extractive gate vs the prompt-only LLM memory model vs keeping everything, on the same windows (a
benchmark, not a test).

Every question with gold evidence is retrieved and windowed as the methods do (the job's retrieval,
radius `w`, L = 8, s = 7). The gate and keep-all are scored on every window. The LLM (the memory model
of the job's `method=lazymem`: its role, prompts and `construct` policy; on CPU the bundled 0.5B,
prompt-only) is too slow for that, so it runs on a seeded sample stratified by whether a window holds
gold: `--windows` windows, half with gold and half without, and all three are scored on that sample. Its
action reward is reweighted to the share of gold-bearing windows among all windows, so the three numbers
estimate the same quantity. A window whose LLM reply yields no decisions keeps nothing (as the method
merges it).

    .venv/bin/python scripts/compare_gates.py --windows 30 -- data=locomo \
        data.path=../shared/data/locomo_dev8.json
    .venv/bin/python scripts/compare_gates.py --windows 30 -- data=longmemeval \
        data.path=../shared/data/longmemeval_oracle_val.json --gate RUN/gate.json

Overrides after `--` compose the root config with +experiment=train_gate_cpu (its `w` and windows);
`--gate` names a gate.json from task=train_gate (default: the bundled one).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import tempfile
import time
from pathlib import Path

import numpy as np
from hydra import compose, initialize_config_dir
from hydra.utils import instantiate

from lazymem.conf import CONF_DIR
from lazymem.construct.render import render_memory, render_raw
from lazymem.data import load_dataset
from lazymem.data.schema import query_time
from lazymem.llm.llm_set import LLMSet
from lazymem.methods.base import Context
from lazymem.methods.extractive_gate import BUNDLED, GateModel, featurize, window_reward
from lazymem.methods.lazymem import LazyMem
from lazymem.tasks.train_gate import question_windows
from lazymem.tokens import count_tokens


def score(rows: list[dict], share_gold: float | None = None) -> dict:
    """Gold kept / non-gold dropped over decided messages; mean action reward (reweighted to
    `share_gold` gold-bearing windows when given); kept tokens and ms per window."""
    gold = [k for r in rows for g, k in zip(r["gold"], r["keep"], strict=True) if g]
    other = [not k for r in rows for g, k in zip(r["gold"], r["keep"], strict=True) if not g]
    if share_gold is None:
        reward = float(np.mean([r["reward"] for r in rows]))
    else:
        with_gold = [r["reward"] for r in rows if any(r["gold"])]
        without = [r["reward"] for r in rows if not any(r["gold"])]
        reward = share_gold * float(np.mean(with_gold)) + (1 - share_gold) * float(np.mean(without))
    return {
        "windows": len(rows),
        "gold_kept": float(np.mean(gold)) if gold else None,
        "nongold_dropped": float(np.mean(other)) if other else None,
        "action_reward": reward,
        "kept_tokens_per_window": float(np.mean([r["tokens"] for r in rows])),
        "ms_per_window": float(np.mean([r["ms"] for r in rows])),
    }


def row(window, gold: set[int], keep: list[bool], text: str, seconds: float) -> dict:
    flags = [i in gold for i in window.idx]
    return {
        "gold": flags,
        "keep": keep,
        "reward": window_reward(flags, keep),
        "tokens": count_tokens(text),
        "ms": 1000 * seconds,
    }


def gate_rows(questions, gate: GateModel, dense) -> tuple[dict, dict]:
    """(question id, window position) -> the row of the gate at its threshold, and of keeping everything."""
    gated, everything = {}, {}
    for q, history, retrieved, windows in questions:
        t0 = time.perf_counter()
        features = featurize(q, history, retrieved, windows, dense)
        per_window = (time.perf_counter() - t0) / max(len(windows), 1)
        for k, (w, x) in enumerate(zip(windows, features, strict=True)):
            t1 = time.perf_counter()
            keep = [bool(b) for b in gate.prob(x) >= gate.threshold]
            kept = [history.messages[i] for i, b in zip(w.idx, keep, strict=True) if b]
            seconds = per_window + time.perf_counter() - t1
            gated[q.id, k] = row(w, set(q.gold_idx), keep, render_raw(kept), seconds)
            everything[q.id, k] = row(
                w, set(q.gold_idx), [True] * len(w), render_raw([history.messages[i] for i in w.idx]), 0.0
            )
    return gated, everything


async def llm_rows(questions, picked: set, method: LazyMem, cfg, log_dir: Path) -> tuple[dict, dict]:
    """The memory model of `method` (its role, prompts and construct policy) on the picked windows; a
    question's picked windows are in flight together."""
    out, outcomes = {}, {}
    with LLMSet(cfg.llm, log_dir) as llms:
        proc = method.processor(Context(llms=llms))
        for q, history, _, windows in questions:
            mine = [k for k in range(len(windows)) if (q.id, k) in picked]
            if not mine:
                continue
            t0 = time.perf_counter()
            results = await proc.process(
                q.text, query_time(q, history), [windows[k] for k in mine], history.messages
            )
            per_window = (time.perf_counter() - t0) / len(mine)
            for k, r in zip(mine, results, strict=True):
                decisions = r.decisions or [None] * len(r.window)
                keep = [d is not None and d.op == "KEEP" for d in decisions]
                kept = {
                    i: d.content for i, d in zip(r.window.idx, decisions, strict=True) if d and d.op == "KEEP"
                }
                out[q.id, k] = row(
                    r.window, set(q.gold_idx), keep, render_memory(history.messages, kept), per_window
                )
                outcomes[r.outcome] = outcomes.get(r.outcome, 0) + 1
    return out, outcomes


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--windows", type=int, default=30, help="windows in the LLM's stratified sample")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--gate", default=BUNDLED, help="a gate.json (default: the bundled one)")
    ap.add_argument("--out", type=Path, default=None, help="write the numbers as JSON here")
    ap.add_argument("overrides", nargs="*")
    args = ap.parse_args()
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base=None):
        cfg = compose("config", overrides=["+experiment=train_gate_cpu", "logger=none", *args.overrides])
    model = GateModel.load(args.gate)
    method = instantiate(cfg.method)  # before the retrieval work: a wrong method fails at once
    if not isinstance(method, LazyMem):
        raise SystemExit(f"the LLM row is method=lazymem's memory model, not {type(method).__name__}")
    retriever = instantiate(cfg.retrieval)
    ds = load_dataset(cfg.data)
    dense = retriever.dense(cfg.gate.dense)
    model.check_encoder(dense, f"--gate {args.gate}")
    questions = list(question_windows(ds, retriever, cfg.gate))
    gate, keep_all = gate_rows(questions, model, dense)

    has_gold = {key for key, r in gate.items() if any(r["gold"])}
    share = len(has_gold) / len(gate)
    rng = random.Random(args.seed)
    half = args.windows // 2
    picked = set(rng.sample(sorted(has_gold), min(half, len(has_gold))))
    picked |= set(
        rng.sample(sorted(set(gate) - has_gold), min(args.windows - len(picked), len(gate) - len(has_gold)))
    )
    with tempfile.TemporaryDirectory() as tmp:
        llm, outcomes = asyncio.run(llm_rows(questions, picked, method, cfg, Path(tmp)))

    def on_sample(rows):
        return score([rows[key] for key in sorted(picked)], share)

    memory = cfg.llm.roles[method.role].get("model") or cfg.llm.common.model
    result = {
        "overrides": args.overrides,
        "w": int(cfg.gate.radius),
        "gate": str(args.gate),
        "questions": len(questions),
        "windows": len(gate),
        "share_gold_windows": share,
        "all_windows": {"gate": score(list(gate.values())), "keep_all": score(list(keep_all.values()))},
        "sample": {
            "gate": on_sample(gate),
            "keep_all": on_sample(keep_all),
            f"llm ({memory}, prompt-only)": on_sample(llm),
        },
        "llm_outcomes": outcomes,
    }
    print(render(result))
    if args.out:
        args.out.write_text(json.dumps(result, indent=1) + "\n")


def render(result: dict) -> str:
    lines = [
        f"{' '.join(result['overrides'])}: {result['questions']} questions with gold, "
        f"{result['windows']} windows at w = {result['w']} ({result['share_gold_windows']:.1%} hold gold); "
        f"gate {result['gate']}",
        "",
        "| windows | method | n | gold kept | non-gold dropped | action reward | kept tokens / window "
        "| ms / window |",
        "|---|---|---:|---:|---:|---:|---:|---:|",
    ]
    for part, label in (("all_windows", "all"), ("sample", "stratified sample")):
        for name, s in result[part].items():
            lines.append(
                f"| {label} | {name} | {s['windows']} | {_f(s['gold_kept'])} | {_f(s['nongold_dropped'])} | "
                f"{s['action_reward']:.3f} | {s['kept_tokens_per_window']:.0f} | "
                + ("– |" if name == "keep_all" else f"{s['ms_per_window']:.1f} |")
            )
    lines.append(f"\nLLM outcomes: {result['llm_outcomes']}")
    return "\n".join(lines)


def _f(x):
    return "-" if x is None else f"{x:.3f}"


if __name__ == "__main__":
    main()
