"""The toy engine (the GrpoEngine contract, lazymem/train/grpo/engine.py): its trainer (train.py) learns
nothing, but saves and validates a checkpoint per step as a real one does, so task=train_grpo chooses one
and task=merge_rl makes a model directory of it."""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

from lazymem.train.grpo.engine import Launch


class ToyEngine:
    name = "toy"
    packages = ("lazymem",)  # its trainer is lazymem's own code
    layout = "toy-step-{}"
    env_fix = "put the folder that holds toy_grpo on PYTHONPATH"

    def env_modules(self, grpo):
        return ("toy_grpo",)  # its trainer is `python -m toy_grpo.train`

    def launch(self, grpo, reward, run_dir):
        config = Path(run_dir) / "toy_config.json"
        keys = ("checkpoint_dir", "steps", "best")
        config.write_text(json.dumps({k: grpo[k] for k in keys}), encoding="utf-8")
        command = [sys.executable, "-m", "toy_grpo.train", str(config)]
        return Launch(command, Path(run_dir) / "toy.log", gpus=0, plan_gpus=False, validates=True)

    def checkpoint_facts(self, checkpoint):
        return {"weights": (checkpoint / "weights.txt").read_text(encoding="utf-8").strip()}

    def merge(self, choice, target, run_dir, python, dry_run):
        target.mkdir(parents=True, exist_ok=True)
        shutil.copy2(Path(choice["path"]) / "weights.txt", target / "weights.txt")
        return {"files": ["weights.txt"]}
