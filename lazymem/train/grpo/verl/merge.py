"""VERL's chosen checkpoint as a model directory (task=merge_rl).

VERL saves sharded FSDP checkpoints; its merger turns the chosen step's ``actor/`` shards into a Hugging Face
model directory (``python -m verl.model_merger merge --backend fsdp --local_dir ... --target_dir ...``,
verl 0.9.1 model_merger/base_model_merger.py:34-79). It runs in VERL's environment (``merge.python``, the GPU
nodes' RL environment); ``merge.dry_run=true`` writes command.sh only.
"""

from __future__ import annotations

import shlex
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from lazymem.subproc import stream


def merge_command(python: str | None, checkpoint: str, target: Path) -> list[str]:
    """VERL's merger on one chosen step: its actor's FSDP shards into a Hugging Face directory."""
    return [
        python or sys.executable,
        "-m",
        "verl.model_merger",
        "merge",
        "--backend",
        "fsdp",
        "--local_dir",
        str(Path(checkpoint) / "actor"),
        "--target_dir",
        str(target),
    ]


def merge(
    choice: Mapping[str, Any], target: Path, run_dir: Path, python: str | None, dry_run: bool
) -> dict[str, Any]:
    """Run the merger on the chosen step (its command in command.sh and its output in merge.log)."""
    cmd = merge_command(python, choice["path"], target)
    (run_dir / "command.sh").write_text("#!/bin/sh\n" + shlex.join(cmd) + "\n", encoding="utf-8")
    record = {"command": shlex.join(cmd)}
    if dry_run:
        print(f"dry run: {run_dir / 'command.sh'}")
        return record | {"dry_run": True}
    rc = stream(cmd, run_dir / "merge.log")
    if rc != 0:
        raise RuntimeError(f"VERL's model merger exited with status {rc}; see {run_dir / 'merge.log'}")
    return record
