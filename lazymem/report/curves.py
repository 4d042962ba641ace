"""GRPO learning curves and the memory model's construction by stage, for task=report.

``report.training``: GRPO checkpoint directories (train_metrics.jsonl: one line per optimiser step, with the
batch it trained on; validation_metrics.jsonl: one line per validation round). Plotted: each training
batch's mean reward with a running mean, and the validation reward per round. Tabled: whether the training
reward rose, as the mean of the last fifth of the batches minus the first fifth's, with a bootstrap CI
(batches resampled within each fifth) once each fifth holds ``MIN_PER_FIFTH`` batches. The unit is the
batch, not the step: the optimiser steps that train on one batch log the same values.

Runs whose summary.json holds the table ``construction`` (task=construction_eval) make Table 3 (mini): one
row per stage with 95% CIs over questions.
"""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

from lazymem.report.collect import Run  # noqa: E402
from lazymem.report.tables import STAGE_ORDER, Cell, Table  # noqa: E402
from lazymem.train.grpo.checkpoints import TRAIN_LOG, read_validations  # noqa: E402
from lazymem.train.grpo.diagnostics import load_jsonl  # noqa: E402

MIN_PER_FIFTH = 3  # batches in each fifth before a bootstrap CI is drawn


def batch_rewards(directory: str | Path) -> list[tuple[int, float]]:
    """(batch, its mean reward) per training batch, in order. A line without ``batch`` (logs written before
    it was recorded) is its own batch; a step logged twice (a resumed run) keeps its last line."""
    path = Path(directory) / TRAIN_LOG
    by_step = {int(r["step"]): r for r in load_jsonl(path)} if path.exists() else {}
    by_batch = {int(r.get("batch", step)): float(r["score"]) for step, r in sorted(by_step.items())}
    return sorted(by_batch.items())


def reward_trend(rewards: list[float], resamples: int = 10000, seed: int = 0) -> dict:
    """Mean of the last fifth minus the first fifth; a percentile bootstrap 95% CI of it when each fifth
    holds at least MIN_PER_FIFTH values (fewer give a CI of no meaning: one value resamples to itself)."""
    k = len(rewards) // 5
    out = {"batches": len(rewards), "first": None, "last": None, "diff": None, "low": None, "high": None}
    if k < 1:
        return out
    first, last = np.asarray(rewards[:k]), np.asarray(rewards[-k:])
    out |= {"first": float(first.mean()), "last": float(last.mean())}
    out["diff"] = out["last"] - out["first"]
    if k < MIN_PER_FIFTH:
        return out
    rng = np.random.default_rng(seed)
    pick = rng.integers(0, k, (2, resamples, k))
    low, high = np.percentile(last[pick[0]].mean(1) - first[pick[1]].mean(1), [2.5, 97.5])
    return out | {"low": float(low), "high": float(high)}


def learning_plot(directories: list[str], out: Path) -> Path | None:
    runs = [(Path(d), batch_rewards(d), read_validations(d)) for d in directories]
    runs = [r for r in runs if r[1] or r[2]]
    if not runs:
        return None
    fig, (train_ax, val_ax) = plt.subplots(1, 2, figsize=(11, 4))
    for i, (path, batches, rounds) in enumerate(runs):
        label = path.parent.name or str(path)
        if batches:
            xs, ys = zip(*batches, strict=True)
            train_ax.plot(xs, ys, color=f"C{i}", alpha=0.3, lw=0.8)
            width = max(1, len(ys) // 10)
            running = np.convolve(ys, np.ones(width) / width, mode="valid")
            train_ax.plot(xs[width - 1 :], running, color=f"C{i}", label=f"{label} (mean of {width})")
        if rounds:
            val_ax.plot(sorted(rounds), [rounds[s]["reward"] for s in sorted(rounds)], "o-", color=f"C{i}")
    train_ax.set(title="GRPO: training reward per batch", xlabel="batch", ylabel="mean reward")
    val_ax.set(title="validation reward per round", xlabel="optimiser step", ylabel="mean reward")
    train_ax.legend(fontsize=8)
    fig.tight_layout()
    path = out / "grpo_learning.png"
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def learning_table(directories: list[str]) -> Table | None:
    t = Table(
        "grpo_learning",
        "GRPO: did the training reward rise? (last fifth of the batches minus the first fifth)",
        ["run"],
        ["batches", "first fifth", "last fifth", "Δ", "Δ 95% low", "Δ 95% high"],
        note="Each value is the mean reward of one training batch; the CI resamples the batches within each "
        f"fifth, and needs {MIN_PER_FIFTH} batches in each (no CI: too few batches to tell).",
    )
    for d in directories:
        trend = reward_trend([r for _, r in batch_rewards(d)])
        if trend["batches"]:
            keys = ("first", "last", "diff", "low", "high")
            t.rows.append(
                ([str(d)], [Cell(trend["batches"], digits=0), *(Cell(trend[k], digits=3) for k in keys)])
            )
    return t if t.rows else None


def construction_table(runs: list[Run]) -> Table | None:
    """Table 3 (mini): the construction metrics of every run holding the ``construction`` table."""
    found = [(r, r.summary["tables"]["construction"]) for r in runs if "construction" in r.summary["tables"]]
    if not found:
        return None
    t = Table(
        "table3_construction",
        "Table 3 (mini): the memory model's KEEP/DROP decisions by training stage, on the validation windows",
        ["stage", "run"],
        [
            "Fmt.",
            "Gold kept",
            "±",
            "Non-gold dropped",
            "±",
            "F1",
            "±",
            "Reward",
            "±",
            "Kept words in source",
            "s / question",
            "windows",
        ],
        note="Means over questions; ±: half the 95% bootstrap CI over questions. Greedy replies, the strict "
        "format gate (an invalid reply keeps and drops nothing; reward 0). Kept words in source: the share "
        "of the KEEP contents' words found in the message each keeps (text of the model's own lowers it).",
    )

    def order(item):
        stage = item[1].get("stage") or ""
        return (STAGE_ORDER.index(stage) if stage in STAGE_ORDER else 9, stage)

    for run, c in sorted(found, key=order):
        cells = [Cell(c["format_ok"]["mean"], digits=3)]
        for m in ("gold_kept", "nongold_dropped", "f1", "reward"):
            ci = c[m]
            half = None if ci["low"] is None else (ci["high"] - ci["low"]) / 2
            cells += [Cell(ci["mean"], digits=3), Cell(half, digits=3)]
        copied = c.get("kept_words_in_source") or {}  # absent from runs before it was measured
        cells += [Cell(copied.get("mean"), digits=3)]
        cells += [Cell(c["seconds"]["mean"], digits=2), Cell(c["windows"], digits=0)]
        t.rows.append(([c.get("stage") or "-", run.name], cells))
    return t
