"""The training and validation logs and the RL checkpoint choice (paper Appendix D.1: every model-selection
decision uses the validation split).

Every engine's trainer appends each optimiser step's reward components to ``train_metrics.jsonl`` with the
batch it trained on (task=report's learning curves), and each validation round to
``validation_metrics.jsonl`` in the checkpoint directory, with the curriculum's lambda in force while that
round was scored. The reward mixes action and
quality with that lambda, so reward means of different phases are not comparable: the choice is made among
the kept checkpoints (the engine's ``layout``) validated under the lambda of the latest such round, by the
largest validation mean of ``metric`` (``reward``: our reward's score), the later step on a tie. It is
written to ``selected_checkpoint.json`` with the engine's name and class, and what the engine adds about
the checkpoint (``checkpoint_facts``).
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from lazymem.train.checkpoint_select import SELECTED
from lazymem.train.grpo.diagnostics import load_jsonl
from lazymem.train.grpo.engine import GrpoEngine
from lazymem.train.grpo.reward_metrics import components

VALIDATION_LOG = "validation_metrics.jsonl"
TRAIN_LOG = "train_metrics.jsonl"


def append_training(directory: str | Path, step: int, batch: int, infos: Sequence[Mapping[str, Any]]) -> None:
    """One optimiser step as a JSON line: its number, the batch (from 1) it trained on, and each reward
    component's mean over that batch's rollouts (plain names: ``score``, ``format_ok``, ...)."""
    means = components(infos)
    path = Path(directory) / TRAIN_LOG
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a", encoding="utf-8") as f:
        f.write(json.dumps({"step": int(step), "batch": int(batch), **means}) + "\n")


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


def select_rl_checkpoint(directory: str | Path, engine: GrpoEngine, metric: str = "reward") -> dict:
    """Pick the RL checkpoint among `engine`'s kept ones (see the module docstring) and write
    ``selected_checkpoint.json``."""
    directory = Path(directory)
    rounds = read_validations(directory)
    kept = {
        step: rec
        for step, rec in rounds.items()
        if (directory / engine.layout.format(step)).is_dir() and rec.get(metric) is not None
    }
    if not kept:
        raise ValueError(
            f"no kept checkpoint in {directory} has a validation {metric!r} in {VALIDATION_LOG}: "
            "was the run's test_freq a divisor of its save_freq?"
        )
    lam = kept[max(kept)]["lam"]
    same_phase = {step: rec for step, rec in kept.items() if rec["lam"] == lam}
    step = max(same_phase, key=lambda s: (same_phase[s][metric], s))
    path = directory / engine.layout.format(step)
    cls = type(engine)
    choice = {
        "stage": "rl",
        "engine": engine.name,
        "engine_class": f"{cls.__module__}.{cls.__qualname__}",
        "metric": f"validation mean of {metric}, under lambda {lam}",
        "value": same_phase[step][metric],
        "step": step,
        "path": str(path.resolve()),
        "candidates": {str(s): rec[metric] for s, rec in sorted(same_phase.items())},
        "rule": "kept checkpoints validated under the latest lambda; highest value, later step on a tie",
        **engine.checkpoint_facts(path),
    }
    (directory / SELECTED).write_text(json.dumps(choice, indent=2) + "\n", encoding="utf-8")
    return choice
