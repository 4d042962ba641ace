"""The SFT checkpoint choice on the validation split (lazymem/train/checkpoint_select.py), from the HF
Trainer's state; GRPO's is tests/train/grpo/test_checkpoints.py."""

from __future__ import annotations

import json

from lazymem.train.checkpoint_select import SELECTED, sft_selection


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
