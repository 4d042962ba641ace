"""The VERL 0.9.1 engine of task=train_grpo: `python -m verl.trainer.main_ppo` with Table 10's overrides.

The overrides come from train.grpo (+ train.reward) through grpo_config.py and go to overrides.txt in the run
directory. VERL logs its steps to W&B when the launching run is tracked (``reports``), else not at all. With
``ray_address`` VERL joins that Ray cluster, whose scheduler hands VERL its GPUs through VERL's own placement
groups, so this node's GPU count and GPU plan are not checked; without it VERL starts a Ray of its own on
the GPUs it sees, its workers in train.grpo.python. Checkpoints are ``global_step_N/`` (sharded
FSDP; task=merge_rl makes a model directory of the chosen one).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from lazymem.train.checkpoint_disk import verl_need
from lazymem.train.grpo_config import command, overrides
from lazymem.train.grpo_engine import Launch


class VerlEngine:
    """GRPO on VERL (the GrpoEngine contract, grpo_engine.py)."""

    name = "verl"

    def launch(self, g: Mapping[str, Any], reward: Mapping[str, Any] | None, run_dir: Path) -> Launch:
        loggers = [x for x in g["logger"] if x != "wandb"]
        g = {**g, "logger": [*loggers, "wandb"] if g.get("reports") else loggers}
        ovr = overrides(g, reward)
        (Path(run_dir) / "overrides.txt").write_text("\n".join(ovr) + "\n", encoding="utf-8")
        remote = bool(g.get("ray_address"))
        local_gpus = 0 if remote or int(g["nnodes"]) != 1 else int(g["n_gpus_per_node"])
        return Launch(
            command=command(ovr, g.get("python")),
            log=Path(run_dir) / "verl.log",
            gpus=local_gpus,
            plan_gpus=not remote,
            rl_env=True,
            # VERL's own sync trainer writes no validation log; lazymem's curriculum trainer does
            validates=bool(g["curriculum"]),
            info={"overrides": len(ovr)},
            disk=verl_need(g),
        )
