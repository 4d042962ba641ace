"""A training step's reward metrics and the quality judge's error-rate bound (lazymem/train/grpo/
reward_metrics.py); the engines' trainers apply them (verl/test_trainer.py, trl/test_callbacks.py)."""

from __future__ import annotations

import pytest

from lazymem.train.grpo.reward_metrics import step_metrics

from helpers_train import rollout


def test_step_metrics_hold_the_judge_error_rate(failing_judge):
    """Unit: a training step's reward dicts (our real reward, phase 2) -> reward/* means and the judge's
    error rate over the step's calls; an invalid output calls no judge, a phase-1 step has no rate."""
    out = step_metrics([rollout(["a", "fail b"]), rollout(["c", "d"]), rollout([])])
    assert out["reward/judge_error_rate"] == pytest.approx(1 / 4)
    assert out["reward/judge_calls/mean"] == pytest.approx(4 / 3)
    assert out["reward/format_ok/mean"] == pytest.approx(2 / 3) and out["reward/lam/mean"] == 0.5
    assert not any("gate_error" in k for k in out)  # a string: not a metric
    phase1 = step_metrics([rollout(["fail a"], lam=0.0), rollout([], lam=0.0)])
    assert "reward/judge_error_rate" not in phase1 and phase1["reward/judge_calls/mean"] == 0.0
    assert "reward/r_qual/mean" not in phase1  # None while lambda = 0
