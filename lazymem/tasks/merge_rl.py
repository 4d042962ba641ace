"""task=merge_rl: the chosen GRPO checkpoint as a model directory that vLLM and transformers load.

Reads ``selected_checkpoint.json`` in ``merge.checkpoint_dir`` (written by task=train_grpo: the checkpoint
chosen on the validation split, and the engine that wrote it) and has that engine write ``<run dir>/model``
(lazymem/train/grpo/engine.py's ``merge``: VERL runs its model merger in ``merge.python``, where
``merge.dry_run=true`` writes command.sh only; TRL copies the model or merges its LoRA adapter), then writes
``merged.json``.
"""

from __future__ import annotations

import json
from pathlib import Path

from lazymem.tasks.contract import Task
from lazymem.train.checkpoint_select import SELECTED
from lazymem.train.grpo.engine import GrpoEngine, bundled_engines, recorded_engine


def selected(checkpoint_dir) -> tuple[dict, GrpoEngine]:
    """The choice task=train_grpo wrote and the engine that wrote it, with one clear error when either is
    missing."""
    if not checkpoint_dir:
        raise SystemExit(
            "error: merge.checkpoint_dir is not set: point it at train_grpo's train.grpo.checkpoint_dir"
        )
    path = Path(checkpoint_dir) / SELECTED
    if not path.is_file():
        raise SystemExit(
            f"error: {path} not found: task=train_grpo writes it after training (train.grpo.checkpoint_dir)"
        )
    choice = json.loads(path.read_text(encoding="utf-8"))
    engine = recorded_engine(choice)
    if engine is None or not choice.get("path"):
        engines = " or ".join(bundled_engines())
        raise SystemExit(f"error: {path}: needs `engine` ({engines}) and `path`, found {sorted(choice)}")
    return choice, engine


def run(cfg, run) -> dict:
    opts = cfg.merge
    choice, engine = selected(opts.checkpoint_dir)
    target = (run.dir / "model").resolve()
    record = {
        "engine": choice["engine"],
        "checkpoint": choice["path"],
        "step": choice.get("step"),
        "model": str(target),
    }
    record |= engine.merge(choice, target, run.dir, opts.get("python"), bool(opts.dry_run))
    if record.get("dry_run"):
        return record
    (run.dir / "merged.json").write_text(json.dumps(record, indent=2) + "\n", encoding="utf-8")
    print(f"RL model ({choice['engine']}, step {choice.get('step')}): {target}")
    return record


TASK = Task(run)
