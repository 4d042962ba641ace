"""GRPO learning curves and Table 3 (mini) in task=report (lazymem/report/curves.py)."""

from __future__ import annotations

import json
import random

from lazymem.report.curves import learning_plot, learning_table, reward_trend, step_rewards


def write_log(directory, rewards, rounds=()):
    directory.mkdir(parents=True, exist_ok=True)
    lines = [{"step": i + 1, "score": r} for i, r in enumerate(rewards)]
    lines.append({"step": 1, "score": rewards[0]})  # a resumed run's repeated step keeps one value
    (directory / "train_metrics.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))
    (directory / "validation_metrics.jsonl").write_text(
        "".join(json.dumps({"step": s, "reward": r}) + "\n" for s, r in rounds)
    )


def test_a_rising_reward_has_a_ci_above_zero_and_noise_does_not():
    rng = random.Random(0)
    rising = [i / 50 + rng.gauss(0, 0.05) for i in range(50)]
    trend = reward_trend(rising)
    assert trend["steps"] == 50 and trend["diff"] > 0.5 and trend["low"] > 0
    flat = reward_trend([rng.gauss(0.3, 0.1) for _ in range(50)])
    assert flat["low"] < 0 < flat["high"]
    assert reward_trend([0.1] * 9)["diff"] is None  # fewer than two steps per fifth


def test_the_table_and_plot_read_the_checkpoint_directory(tmp_path):
    ckpt = tmp_path / "run" / "checkpoints"
    write_log(ckpt, [0.1 * (i % 3) + i / 20 for i in range(20)], rounds=[(0, 0.2), (10, 0.5), (20, 0.7)])
    assert len(step_rewards(ckpt)) == 20
    table = learning_table([str(ckpt)])
    ((labels, cells),) = table.rows
    assert labels == [str(ckpt)] and cells[0].ours == 20 and cells[3].ours > 0
    assert learning_plot([str(ckpt)], tmp_path).name == "grpo_learning.png"
    assert learning_table([str(tmp_path / "none")]) is None and learning_plot([], tmp_path) is None
