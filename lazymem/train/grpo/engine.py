"""The contract between the GRPO tasks and an engine, the checks every engine shares, and how an engine is
found by its config or by the checkpoint choice it wrote.

An engine is a folder (verl/ and trl/ beside this file, or a package of your own) and a config in the group
train/grpo that names its class (``engine._target_``). It turns train.grpo (+ train.reward) into one
subprocess command and the files it reads, written into the run directory; task=train_grpo runs the checks,
starts the command and has the checkpoint chosen in the engine's layout (checkpoints.py), and task=merge_rl
asks the engine that wrote the choice for a model directory. No code outside an engine's folder branches on
its name.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import pyarrow.parquet as pq
from hydra.utils import get_class
from omegaconf import OmegaConf

from lazymem.conf import CONF_DIR
from lazymem.train.checkpoint_disk import DiskNeed, check_disk

__all__ = [
    "DiskNeed",
    "GrpoEngine",
    "Launch",
    "bundled_engines",
    "check_disk",
    "check_inputs",
    "engine_packages",
    "recorded_engine",
    "reward_settings",
]
# the config group whose files name the engines (train/grpo=NAME); files starting with _ are shared keys
GROUP = CONF_DIR / "train" / "grpo"


@dataclass(frozen=True)
class Launch:
    """What the task starts and checks for one engine's run."""

    command: list[str]
    log: Path  # the subprocess's output, also streamed to the console
    gpus: int  # GPUs this node must show before it starts (0: none checked, e.g. a CPU or a Ray cluster)
    plan_gpus: bool  # the GPU plan (placement.train.grpo) picks the subprocess's CUDA_VISIBLE_DEVICES
    validates: bool  # it writes validation_metrics.jsonl, from which a checkpoint is chosen
    info: dict[str, Any] = field(default_factory=dict)  # for the task's result (e.g. the override count)
    disk: DiskNeed | None = None  # the kept checkpoints' disk space (None: the model's size unknown)
    # processes that call the reward at once, each from one event loop, where the judge client's concurrency
    # holds (lazymem/llm/client.py endpoint_slots; grpo/judge_load.py); None: the engine does not say
    reward_loops: int | None = None
    reward_loops_key: str | None = None  # the setting that sets reward_loops, for a fix to name (None: none)


class GrpoEngine(Protocol):
    """A GRPO trainer behind task=train_grpo and task=merge_rl."""

    name: str  # recorded in selected_checkpoint.json and in the task's result
    packages: tuple[str, ...]  # the distributions that compute its results (a chain stage's fingerprint)
    layout: str  # the directory of step N's checkpoint in checkpoint_dir, "{}" standing for N
    env_fix: str  # how to build (or name) a Python that imports what env_modules names

    def env_modules(self, grpo: Mapping[str, Any] | None) -> tuple[str, ...]:
        """What train.grpo.python must import before the trainer starts with these settings (None: the
        bundled config's, which `lazymem doctor` checks in the RL environment); () checks nothing. Checked
        by train_grpo, a chain's preflight and gpu_check (preflight.import_problems)."""
        ...

    def launch(self, grpo: Mapping[str, Any], reward: Mapping[str, Any] | None, run_dir: Path) -> Launch:
        """Write the engine's own files into ``run_dir``; ValueError for inconsistent settings."""
        ...

    def checkpoint_facts(self, checkpoint: Path) -> dict[str, Any]:
        """What the checkpoint choice records about the chosen checkpoint besides its path."""
        ...

    def merge(
        self, choice: Mapping[str, Any], target: Path, run_dir: Path, python: str | None, dry_run: bool
    ) -> dict[str, Any]:
        """Write the chosen checkpoint to ``target`` as a model directory that vLLM and transformers load,
        with `python` where the engine runs a command; returns what merged.json adds to the choice. A dry
        run that writes no model returns ``dry_run: True``."""
        ...


def bundled_engines() -> dict[str, type[GrpoEngine]]:
    """The engines the bundled configs name (conf/train/grpo/NAME.yaml), by engine name, in file order."""
    found = {}
    for path in sorted(GROUP.glob("[!_]*.yaml")):
        target = OmegaConf.select(OmegaConf.load(path), "engine._target_")
        if target:
            cls = get_class(target)
            found[cls.name] = cls
    return found


def engine_packages(target: str | None) -> tuple[str, ...]:
    """The packages of the engine class at `target` (train.grpo.engine._target_); of every bundled engine
    when there is none."""
    if target:
        return tuple(get_class(target).packages)
    return tuple(p for cls in bundled_engines().values() for p in cls.packages)


def recorded_engine(choice: Mapping[str, Any]) -> GrpoEngine | None:
    """The engine that wrote a checkpoint choice: the class it recorded, else (a choice written before the
    class was) the bundled engine of its name; None when neither is there."""
    if choice.get("engine_class"):
        return get_class(choice["engine_class"])()
    cls = bundled_engines().get(choice.get("engine"))
    return cls() if cls else None


def check_inputs(grpo: Mapping[str, Any]) -> None:
    """The build_rl rows and the SFT checkpoint are named (ValueError otherwise)."""
    if not grpo.get("rl_data_dir"):
        raise ValueError("train.grpo.rl_data_dir is not set: point it at a task=build_rl run directory")
    if not grpo.get("model"):
        # RL starts from the SFT checkpoint, which is also the reference policy (Table 10); never the base
        raise ValueError(
            "train.grpo.model is not set: GRPO starts from the SFT checkpoint. Pass "
            "train.grpo.model=<the `path` in a train_sft run's checkpoint.json> (or set $LAZYMEM_SFT_MODEL)"
        )
    val = Path(grpo["rl_data_dir"]) / "val.parquet"
    if val.is_file() and pq.read_metadata(val).num_rows == 0:
        # the curriculum and the checkpoint choice read validation rounds: without rows there are none
        raise ValueError(
            f"{val} holds no row (see rl_stats.json: its validation windows hold no gold message to balance "
            "against): validate on every window with train.grpo.data.balance_val=false in build_rl, or give "
            "it more validation questions"
        )
    if grpo["train_batch_size"] % grpo["ppo_mini_batch_size"]:
        # VERL 0.9.1's validate_config only checks mini <= batch; a remainder would leave a ragged update
        raise ValueError(
            f"ppo_mini_batch_size {grpo['ppo_mini_batch_size']} must divide "
            f"train_batch_size {grpo['train_batch_size']}"
        )


def reward_settings(reward: Mapping[str, Any], checkpoint_dir: str | Path) -> dict[str, Any]:
    """The reward's settings as the engines pass them to ``lazymem.train.grpo.reward``: eta, the curriculum
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
