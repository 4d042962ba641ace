"""Checkpoint choice on the validation split (paper Appendix D.1: every model-selection decision uses it).

RL: both GRPO engines (lazymem's VERL trainer, the TRL engine's callback) append every validation round to
``validation_metrics.jsonl`` in the checkpoint directory, with the curriculum's lambda in force while that
round was scored. The reward mixes action and quality with that lambda, so reward means of different phases
are not comparable: the choice is made among the kept checkpoints (VERL: ``global_step_N``, TRL / the HF
Trainer: ``checkpoint-N``) validated under the lambda of the latest such round, by the largest validation
mean of ``metric`` (``reward``: our reward's score), the later step on a tie. A TRL checkpoint is a model
directory transformers and vLLM load, or a LoRA adapter directory (``adapter: true``).

Both stages write ``selected_checkpoint.json`` beside their checkpoints: metric, value, step and path.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from lazymem.train.diagnostics import load_jsonl

VALIDATION_LOG = "validation_metrics.jsonl"
SELECTED = "selected_checkpoint.json"
# each engine's checkpoint directory for step N
LAYOUTS = {"verl": "global_step_{}", "trl": "checkpoint-{}"}


def append_validation(directory: str | Path, record: Mapping[str, Any]) -> None:
    """One validation round as a JSON line (numbers only: VERL's metrics may hold numpy scalars)."""
    path = Path(directory) / VALIDATION_LOG
    path.parent.mkdir(parents=True, exist_ok=True)
    clean = {k: _number(v) for k, v in record.items()}
    with open(path, "a", encoding="utf-8") as f:
        f.write(json.dumps({k: v for k, v in clean.items() if v is not None}) + "\n")


def _number(v: Any) -> float | int | None:
    try:
        x = float(v)
    except (TypeError, ValueError):
        return None
    if not math.isfinite(x):
        return None
    return int(x) if isinstance(v, int) else x


def read_validations(directory: str | Path) -> dict[int, dict]:
    """Validation rounds by step; a step validated twice (a resumed run) keeps its last round."""
    path = Path(directory) / VALIDATION_LOG
    out: dict[int, dict] = {}
    if path.exists():
        for rec in load_jsonl(path):
            out[int(rec["step"])] = rec
    return out


def select_rl_checkpoint(directory: str | Path, metric: str = "reward", engine: str = "verl") -> dict:
    """Pick the RL checkpoint of `engine`'s layout (see the module docstring) and write
    ``selected_checkpoint.json``."""
    directory = Path(directory)
    layout = LAYOUTS[engine]
    rounds = read_validations(directory)
    kept = {
        step: rec
        for step, rec in rounds.items()
        if (directory / layout.format(step)).is_dir() and rec.get(metric) is not None
    }
    if not kept:
        raise ValueError(
            f"no kept checkpoint in {directory} has a validation {metric!r} in {VALIDATION_LOG}: "
            "was the run's test_freq a divisor of its save_freq?"
        )
    lam = kept[max(kept)]["lam"]
    same_phase = {step: rec for step, rec in kept.items() if rec["lam"] == lam}
    step = max(same_phase, key=lambda s: (same_phase[s][metric], s))
    path = directory / layout.format(step)
    choice = {
        "stage": "rl",
        "engine": engine,
        "metric": f"validation mean of {metric}, under lambda {lam}",
        "value": same_phase[step][metric],
        "step": step,
        "path": str(path.resolve()),
        "candidates": {str(s): rec[metric] for s, rec in sorted(same_phase.items())},
        "rule": "kept checkpoints validated under the latest lambda; highest value, later step on a tie",
    }
    if engine == "trl":  # peft writes adapter_config.json beside the adapter's weights
        choice["adapter"] = (path / "adapter_config.json").is_file()
    (directory / SELECTED).write_text(json.dumps(choice, indent=2) + "\n", encoding="utf-8")
    return choice


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
