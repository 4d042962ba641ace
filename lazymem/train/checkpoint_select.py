"""The SFT checkpoint choice on the validation split (paper Appendix D.1: every model-selection decision uses
it): the HF Trainer's best checkpoint by eval loss. GRPO's choice is lazymem/train/grpo/checkpoints.py; both
stages write ``selected_checkpoint.json`` beside their checkpoints: metric, value, step and path.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

SELECTED = "selected_checkpoint.json"


def sft_selection(output_dir: str | Path, trainer_state: Mapping[str, Any]) -> dict | None:
    """The SFT choice from the HF Trainer's state (``load_best_model_at_end`` by eval loss on the val
    split), written to ``selected_checkpoint.json``; None when the run had no validation set."""
    best = trainer_state.get("best_model_checkpoint")
    if not best:
        return None
    evals = [h for h in trainer_state.get("log_history", []) if "eval_loss" in h]
    step = trainer_state.get("best_global_step") or int(Path(best).name.rsplit("-", 1)[-1])
    choice = {
        "stage": "sft",
        "metric": "eval_loss on the validation split (lower is better)",
        "value": trainer_state.get("best_metric"),
        "step": step,
        "path": best,
        "weights_in_output_dir": True,  # load_best_model_at_end: the final save holds the chosen weights
        "candidates": {str(h["step"]): h["eval_loss"] for h in evals},
    }
    Path(output_dir, SELECTED).write_text(json.dumps(choice, indent=2) + "\n", encoding="utf-8")
    return choice
