"""The VERL 0.9.1 engine of task=train_grpo: `python -m verl.trainer.main_ppo` with Table 10's overrides.

The overrides come from train.grpo (+ train.reward) through overrides.py and go to overrides.txt in the run
directory. VERL logs its steps to W&B when the launching run is tracked (``reports``), else not at all. With
``ray_address`` VERL joins that Ray cluster, whose scheduler hands VERL its GPUs through VERL's own placement
groups, so this node's GPU count and GPU plan are not checked; without it VERL starts a Ray of its own on
the GPUs it sees, its workers in train.grpo.python. Checkpoints are ``global_step_N/`` (sharded
FSDP; task=merge_rl makes a model directory of the chosen one, merge.py).

Their disk space, bytes per parameter of one checkpoint: VERL 0.9.1's FSDP actor is built in fp32 (engine
``model_dtype: fp32``: verl/trainer/config/engine/fsdp.yaml:33, verl/workers/engine/fsdp/transformer_impl.py:
258-264). Every rank saves its model shard ("model") and its AdamW state, exp_avg and exp_avg_sq in the
parameters' fp32 ("optimizer"), the scheduler and RNG ("extra"): verl/utils/checkpoint/
fsdp_checkpoint_manager.py:310-362, so 4 + 8 = 12; "hf_model" adds a bfloat16 copy
(fsdp_checkpoint_manager.py:422-462), 2 more. Before a save it deletes down to max_actor_ckpt_to_keep - 1
(checkpoint_manager.py:166-179; with 1 it keeps the old one until the new is saved, :181-195), so K are on
disk at once (2 for K = 1).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from lazymem.train.checkpoint_disk import GIB, DiskNeed, disk_need, model_params
from lazymem.train.grpo.engine import Launch
from lazymem.train.grpo.verl.merge import merge
from lazymem.train.grpo.verl.overrides import command, overrides, reward_workers


def verl_need(grpo: Mapping[str, Any]) -> DiskNeed | None:
    """VERL's FSDP checkpoints (see the module docstring); None when the model's size cannot be read."""
    if (found := model_params(grpo.get("model"))) is None:
        return None
    params, name, _ = found
    contents = set(grpo.get("save_contents") or ())
    per = 4 * ("model" in contents) + 8 * ("optimizer" in contents) + 2 * ("hf_model" in contents)
    keep = int(grpo.get("max_actor_ckpt_to_keep") or 0)
    if keep <= 0:  # null: every checkpoint stays, one per save_freq steps of the whole run
        steps = int(grpo["data"]["size"]) // int(grpo["train_batch_size"]) * int(grpo["total_epochs"])
        keep = math.ceil(steps / int(grpo["save_freq"]))
    what = f"{name} x {per} bytes: {', '.join(sorted(contents))}"
    return disk_need(max(keep, 2), params * per / GIB, 0.0, what)


class VerlEngine:
    """GRPO on VERL (the GrpoEngine contract, grpo/engine.py)."""

    name = "verl"
    packages = ("verl",)
    layout = "global_step_{}"
    env_fix = (
        "bash scripts/setup_gpu_env.sh rl on the GPU node (flash-attn 2.8.3 builds there against the "
        "environment's torch, with --no-build-isolation and CUDA's nvcc on PATH; docs/gpu-placement.md), or "
        "point train.grpo.python at an environment that has it"
    )

    def env_modules(self, grpo: Mapping[str, Any] | None) -> tuple[str, ...]:
        # VERL 0.9.1 loads the actor and the reference with attn_implementation flash_attention_2 unless
        # override_config says otherwise (verl/workers/config/model.py:185); verl[vllm] brings no flash-attn
        return ("verl", "flash_attn")

    def launch(self, grpo: Mapping[str, Any], reward: Mapping[str, Any] | None, run_dir: Path) -> Launch:
        loggers = [x for x in grpo["logger"] if x != "wandb"]
        grpo = {**grpo, "logger": [*loggers, "wandb"] if grpo.get("reports") else loggers}
        ovr = overrides(grpo, reward)
        (Path(run_dir) / "overrides.txt").write_text("\n".join(ovr) + "\n", encoding="utf-8")
        remote = bool(grpo.get("ray_address"))
        local_gpus = 0 if remote or int(grpo["nnodes"]) != 1 else int(grpo["n_gpus_per_node"])
        return Launch(
            command=command(ovr, grpo.get("python")),
            log=Path(run_dir) / "verl.log",
            gpus=local_gpus,
            plan_gpus=not remote,
            # VERL's own sync trainer writes no validation log; lazymem's curriculum trainer does
            validates=bool(grpo["curriculum"]),
            info={"overrides": len(ovr)},
            disk=verl_need(grpo),
            # VERL's reward loop workers, each calling the reward on its own event loop (overrides.py)
            reward_loops=reward_workers(grpo),
            reward_loops_key="train.grpo.reward_workers",
        )

    def checkpoint_facts(self, checkpoint: Path) -> dict[str, Any]:
        return {}  # a sharded FSDP checkpoint: nothing more to tell merge_rl

    def merge(
        self, choice: Mapping[str, Any], target: Path, run_dir: Path, python: str | None, dry_run: bool
    ) -> dict[str, Any]:
        return merge(choice, target, run_dir, python, dry_run)
