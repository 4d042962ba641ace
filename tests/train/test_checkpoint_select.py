"""Checkpoint choice on the validation split (lazymem/train/checkpoint_select.py): RL from the validation
log lazymem's VERL trainer writes, SFT from the HF Trainer's state."""

from __future__ import annotations

import json

import pytest

from lazymem.train.checkpoint_select import (
    SELECTED,
    append_validation,
    read_validations,
    select_rl_checkpoint,
    sft_selection,
)


def rl_run(tmp_path, rounds, kept):
    """A checkpoint dir with validation rounds (step, lam, reward) and the kept global_step_N dirs."""
    for step, lam, reward in rounds:
        append_validation(tmp_path, {"step": step, "lam": lam, "phase": 2 if lam else 1, "reward": reward})
    for step in kept:
        (tmp_path / f"global_step_{step}").mkdir()
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
    choice = select_rl_checkpoint(d)
    assert (choice["step"], choice["value"]) == (120, 0.7)
    assert choice["path"] == str((d / "global_step_120").resolve())
    assert set(choice["candidates"]) == {"90", "120", "150"}  # phase 1's step 60 is not comparable
    assert json.loads((d / SELECTED).read_text()) == choice


def test_rl_tie_goes_to_the_later_step_and_a_resumed_round_replaces_the_old(tmp_path):
    d = rl_run(tmp_path, [(30, 0.0, 0.5), (60, 0.0, 0.5), (60, 0.0, 0.4), (90, 0.0, 0.5)], kept=[30, 60, 90])
    assert read_validations(d)[60]["reward"] == 0.4
    assert select_rl_checkpoint(d)["step"] == 90


def test_rl_other_metric_and_no_candidate(tmp_path):
    append_validation(
        tmp_path, {"step": 30, "lam": 0.0, "reward": 0.1, "format_ok": 0.9, "bad": float("nan")}
    )
    append_validation(tmp_path, {"step": 60, "lam": 0.0, "reward": 0.2, "format_ok": 0.8})
    (tmp_path / "global_step_30").mkdir()
    (tmp_path / "global_step_60").mkdir()
    assert "bad" not in read_validations(tmp_path)[30]  # non-finite values are left out
    assert select_rl_checkpoint(tmp_path, metric="format_ok")["step"] == 30
    with pytest.raises(ValueError, match="no kept checkpoint"):
        select_rl_checkpoint(tmp_path / "empty")


def test_sft_choice_from_the_trainer_state(tmp_path):
    state = {
        "best_model_checkpoint": str(tmp_path / "checkpoint-8"),
        "best_metric": 0.31,
        "log_history": [
            {"loss": 1.0, "step": 4},
            {"eval_loss": 0.31, "step": 8},
            {"eval_loss": 0.35, "step": 16},
        ],
    }
    choice = sft_selection(tmp_path, state)
    assert (choice["step"], choice["value"], choice["candidates"]) == (8, 0.31, {"8": 0.31, "16": 0.35})
    assert json.loads((tmp_path / SELECTED).read_text()) == choice
    assert sft_selection(tmp_path / "x", {"log_history": []}) is None  # no validation set, no choice
