"""GRPO learning curves and Table 3 (mini) in task=report (lazymem/report/curves.py)."""

from __future__ import annotations

import json
import random

from lazymem.report.curves import MIN_PER_FIFTH, batch_rewards, learning_plot, learning_table, reward_trend


def write_log(directory, rewards, rounds=(), updates=1):
    """train_metrics.jsonl as the TRL engine writes it: each batch logged at ``updates`` optimiser steps."""
    directory.mkdir(parents=True, exist_ok=True)
    lines = [
        {"step": b * updates + u + 1, "batch": b + 1, "score": r}
        for b, r in enumerate(rewards)
        for u in range(updates)
    ]
    lines.append(dict(lines[0]))  # a resumed run's repeated step keeps one value
    (directory / "train_metrics.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))
    (directory / "validation_metrics.jsonl").write_text(
        "".join(json.dumps({"step": s, "reward": r}) + "\n" for s, r in rounds)
    )


def test_a_rising_reward_has_a_ci_above_zero_and_noise_does_not():
    rng = random.Random(0)
    rising = [i / 50 + rng.gauss(0, 0.05) for i in range(50)]
    trend = reward_trend(rising)
    assert trend["batches"] == 50 and trend["diff"] > 0.5 and trend["low"] > 0
    flat = reward_trend([rng.gauss(0.3, 0.1) for _ in range(50)])
    assert flat["low"] < 0 < flat["high"]


def test_too_few_batches_per_fifth_give_the_means_and_no_ci():
    """One or two batches a fifth resample to (nearly) themselves: a CI of no width is no evidence."""
    few = reward_trend([0.25, 0.5, 0.5, 0.5, 0.5, 0.5, 0.5, 0.5, 0.5, 1.0])
    assert (few["first"], few["last"], few["diff"]) == (0.375, 0.75, 0.375)
    assert few["low"] is None and few["high"] is None
    assert reward_trend([0.1] * 4)["diff"] is None  # under one batch a fifth
    enough = reward_trend([0.1, 0.3] * (5 * MIN_PER_FIFTH // 2 + 1))
    assert enough["low"] is not None and enough["low"] <= enough["diff"] <= enough["high"]


def test_a_batch_logged_at_two_steps_counts_once(tmp_path):
    """chain_mini's 12 steps are 6 batches of 2 updates: the trend's unit is the batch, so each fifth is one
    batch (the old per-step bootstrap drew a CI [0.75, 0.75] from one batch counted twice)."""
    ckpt = tmp_path / "checkpoints"
    write_log(ckpt, [0.25, 0.75, 0.875, 0.5, 1.0, 1.0], updates=2)
    assert batch_rewards(ckpt) == [(1, 0.25), (2, 0.75), (3, 0.875), (4, 0.5), (5, 1.0), (6, 1.0)]
    ((_, cells),) = learning_table([str(ckpt)]).rows
    assert cells[0].ours == 6 and cells[3].ours == 0.75 and cells[4].ours is None
    # a log written before batches were recorded: each step is its own batch
    (ckpt / "train_metrics.jsonl").write_text('{"step": 1, "score": 0.5}\n{"step": 2, "score": 0.7}\n')
    assert batch_rewards(ckpt) == [(1, 0.5), (2, 0.7)]


def test_the_table_and_plot_read_the_checkpoint_directory(tmp_path):
    ckpt = tmp_path / "run" / "checkpoints"
    write_log(ckpt, [0.1 * (i % 3) + i / 20 for i in range(20)], rounds=[(0, 0.2), (10, 0.5), (20, 0.7)])
    assert len(batch_rewards(ckpt)) == 20
    table = learning_table([str(ckpt)])
    ((labels, cells),) = table.rows
    assert labels == [str(ckpt)] and cells[0].ours == 20 and cells[3].ours > 0 and cells[4].ours is not None
    assert learning_plot([str(ckpt)], tmp_path).name == "grpo_learning.png"
    assert learning_table([str(tmp_path / "none")]) is None and learning_plot([], tmp_path) is None
