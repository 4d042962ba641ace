"""The contract between task=train_grpo and a GRPO engine (VERL, TRL), and the checks both share.

An engine turns train.grpo (+ train.reward) into one subprocess command and the files it reads, written
into the run directory; the task runs the checks, starts the command, and chooses the checkpoint after it.
The config names the engine class (``train.grpo.engine._target_``), so the task never branches on a name.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import pyarrow.parquet as pq

from lazymem.train.checkpoint_disk import DiskNeed, check_disk

__all__ = ["DiskNeed", "GrpoEngine", "Launch", "check_disk", "check_inputs", "reward_settings"]


@dataclass(frozen=True)
class Launch:
    """What the task starts and checks for one engine's run."""

    command: list[str]
    log: Path  # the subprocess's output, also streamed to the console
    gpus: int  # GPUs this node must show before it starts (0: none checked, e.g. a CPU or a Ray cluster)
    plan_gpus: bool  # the GPU plan (placement.train.grpo) picks the subprocess's CUDA_VISIBLE_DEVICES
    rl_env: bool  # the command's Python must import VERL's modules (preflight.rl_env_problems)
    validates: bool  # it writes validation_metrics.jsonl, from which a checkpoint is chosen
    info: dict[str, Any] = field(default_factory=dict)  # for the task's result (e.g. the override count)
    disk: DiskNeed | None = None  # the kept checkpoints' disk space (None: the model's size unknown)


class GrpoEngine(Protocol):
    """A GRPO trainer behind task=train_grpo."""

    name: str  # "verl" | "trl": recorded in selected_checkpoint.json, names the checkpoint layout

    def launch(self, g: Mapping[str, Any], reward: Mapping[str, Any] | None, run_dir: Path) -> Launch:
        """Write the engine's own files into ``run_dir``; ValueError for inconsistent settings."""
        ...


def check_inputs(g: Mapping[str, Any]) -> None:
    """The build_rl rows and the SFT checkpoint are named (ValueError otherwise)."""
    if not g.get("rl_data_dir"):
        raise ValueError("train.grpo.rl_data_dir is not set: point it at a task=build_rl run directory")
    if not g.get("model"):
        # RL starts from the SFT checkpoint, which is also the reference policy (Table 10); never the base
        raise ValueError(
            "train.grpo.model is not set: GRPO starts from the SFT checkpoint. Pass "
            "train.grpo.model=<the `path` in a train_sft run's checkpoint.json> (or set $LAZYMEM_SFT_MODEL)"
        )
    val = Path(g["rl_data_dir"]) / "val.parquet"
    if val.is_file() and pq.read_metadata(val).num_rows == 0:
        # the curriculum and the checkpoint choice read validation rounds: without rows there are none
        raise ValueError(
            f"{val} holds no row (see rl_stats.json: its validation windows hold no gold message to balance "
            "against): validate on every window with train.grpo.data.balance_val=false in build_rl, or give "
            "it more validation questions"
        )
    if g["train_batch_size"] % g["ppo_mini_batch_size"]:
        # VERL 0.9.1's validate_config only checks mini <= batch; a remainder would leave a ragged update
        raise ValueError(
            f"ppo_mini_batch_size {g['ppo_mini_batch_size']} must divide "
            f"train_batch_size {g['train_batch_size']}"
        )


def reward_settings(reward: Mapping[str, Any], checkpoint_dir: str | Path) -> dict[str, Any]:
    """The reward's settings as both engines pass them to ``lazymem.train.reward``: eta, the curriculum
    (its state file defaults to curriculum_state.json in the checkpoint directory, so a resume keeps the
    phase) and the judge. The curriculum's trainer side reads tau and the lambdas from the same dict."""
    cur = reward["curriculum"]
    state = cur["state_path"] or Path(checkpoint_dir) / "curriculum_state.json"
    return {
        "eta": reward["eta"],
        "curriculum_state": str(Path(state).resolve()),
        "lam_phase1": cur["lam_phase1"],
        "lam_phase2": cur["lam_phase2"],
        "tau": cur["tau"],
        "judge": dict(reward["judge"]),
    }
