"""The RL checkpoint choice on the validation split (lazymem/train/grpo/checkpoints.py), from the validation
log every engine's trainer writes, among the checkpoints of the engine's layout."""

from __future__ import annotations

import json

import pytest

from lazymem.train.checkpoint_select import SELECTED
from lazymem.train.grpo.checkpoints import append_validation, read_validations, select_rl_checkpoint


class StepEngine:
    """An engine's layout and the fact it adds about a chosen checkpoint, nothing more."""

    name = "step"
    layout = "step_{}"

    def checkpoint_facts(self, checkpoint):
        return {"size": len(list(checkpoint.iterdir()))}


def rl_run(tmp_path, rounds, kept):
    """A checkpoint dir with validation rounds (step, lam, reward) and the kept step_N dirs."""
    for step, lam, reward in rounds:
        append_validation(tmp_path, {"step": step, "lam": lam, "phase": 2 if lam else 1, "reward": reward})
    for step in kept:
        (tmp_path / f"step_{step}").mkdir()
    return tmp_path


def test_rl_picks_the_best_kept_checkpoint_of_the_latest_phase(tmp_path):
    # phase 1 rewards (action only) run higher than phase 2's mix, and step 30's checkpoint was rotated out
    rounds = [
        (0, 0.0, 0.2),
        (30, 0.0, 0.95),
        (60, 0.0, 0.9),
        (90, 0.5, 0.6),
        (120, 0.5, 0.7),
        (150, 0.5, 0.65),
    ]
    d = rl_run(tmp_path, rounds, kept=[60, 90, 120, 150])
    choice = select_rl_checkpoint(d, StepEngine())
    assert (choice["step"], choice["value"]) == (120, 0.7)
    assert choice["path"] == str((d / "step_120").resolve())
    assert (choice["engine"], choice["engine_class"], choice["size"]) == ("step", f"{__name__}.StepEngine", 0)
    assert set(choice["candidates"]) == {"90", "120", "150"}  # phase 1's step 60 is not comparable
    assert json.loads((d / SELECTED).read_text()) == choice


def test_rl_tie_goes_to_the_later_step_and_a_resumed_round_replaces_the_old(tmp_path):
    d = rl_run(tmp_path, [(30, 0.0, 0.5), (60, 0.0, 0.5), (60, 0.0, 0.4), (90, 0.0, 0.5)], kept=[30, 60, 90])
    assert read_validations(d)[60]["reward"] == 0.4
    assert select_rl_checkpoint(d, StepEngine())["step"] == 90


def test_rl_other_metric_and_no_candidate(tmp_path):
    append_validation(
        tmp_path, {"step": 30, "lam": 0.0, "reward": 0.1, "format_ok": 0.9, "bad": float("nan")}
    )
    append_validation(tmp_path, {"step": 60, "lam": 0.0, "reward": 0.2, "format_ok": 0.8})
    (tmp_path / "step_30").mkdir()
    (tmp_path / "step_60").mkdir()
    assert "bad" not in read_validations(tmp_path)[30]  # non-finite values are left out
    assert select_rl_checkpoint(tmp_path, StepEngine(), metric="format_ok")["step"] == 30
    with pytest.raises(ValueError, match="no kept checkpoint"):
        select_rl_checkpoint(tmp_path / "empty", StepEngine())
