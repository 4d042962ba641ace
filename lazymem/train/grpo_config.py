"""VERL 0.9.1 overrides for the GRPO stage (paper Table 10), built from conf/train/grpo/verl.yaml
(+ conf/train/grpo/_common.yaml).

Key names were read from verl/trainer/config/_generated_ppo_trainer.yaml. Notes on the non-obvious ones:
`clip_ratio` alone does nothing (the loss reads clip_ratio_low/high); `ppo_mini_batch_size` counts
prompts; VERL defaults to 8 GPUs and rollout TP 2, hence explicit values; `rollout.name` has no default;
the train dataloader always drops the last partial batch (ray_trainer / v1 trainer_base), so no key.
With `curriculum` on, `trainer.v1.trainer_mode` selects lazymem's trainer (lazymem/train/verl_trainer.py),
which feeds each validation's format-valid rate to the reward curriculum. D.3's seeds, reference-model
offload / compile and checkpoint contents are set explicitly, and so are the VERL 0.7.1 defaults that 0.9.1
changed (`verl_0_7_1`; the full comparison is docs/train_defaults.md).
"""

from __future__ import annotations

import json
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from lazymem.train import verl_trainer
from lazymem.train.grpo_engine import check_inputs, reward_settings

A = "actor_rollout_ref.actor"
R = "actor_rollout_ref.rollout"
KW = "+reward.custom_reward_function.reward_kwargs"
# a key VERL's runtime_env lacks, merged into ray.init(runtime_env=...) by verl/trainer/main_ppo.py run_ppo
SETUP_HOOK = "+ray_kwargs.ray_init.runtime_env.worker_process_setup_hook"


def value(v: Any) -> str:
    """A Hydra override value: bools/None as YAML words, lists as [..], dicts as {k:v,..}, strings quoted
    when needed."""
    if v is None:
        return "null"
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (int, float)):
        return repr(v)
    if isinstance(v, (list, tuple)):
        return "[" + ",".join(value(x) for x in v) + "]"
    if isinstance(v, Mapping):
        bad = [k for k in v if not (isinstance(k, str) and k.isidentifier())]
        if bad:
            raise ValueError(f"dict keys {bad} cannot be written as a Hydra override")
        return "{" + ",".join(f"{k}:{value(x)}" for k, x in v.items()) + "}"
    s = str(v)
    plain = s and all(c.isalnum() or c in "_-./" for c in s) and s.lower() not in ("true", "false", "null")
    if plain and not _number(s):
        return s
    return json.dumps(s)  # double-quoted; Hydra's grammar accepts it and keeps it a string


def _number(s: str) -> bool:
    try:
        float(s)
    except ValueError:
        return False
    return True


def reward_kwargs(reward: Mapping[str, Any], checkpoint_dir: Path) -> list[str]:
    """eta, curriculum settings and the judge config as reward_kwargs, one key per override.

    The curriculum trainer reads its settings here too (verl_trainer.curriculum_from_config): one source.
    """
    settings = reward_settings(reward, checkpoint_dir)
    judge = settings.pop("judge")
    out = [f"{KW}.{k}={value(v)}" for k, v in settings.items()]
    out += [f"{KW}.judge.{k}={value(v)}" for k, v in judge.items()]
    return out


def ray_overrides(address: str | None, gpus: int) -> list[str]:
    """Where VERL's Ray runs. verl/trainer/main_ppo.py:57-74 passes ray_kwargs.ray_init to ray.init only when
    Ray is not initialised yet. With an address VERL joins that cluster; ray.init refuses num_cpus/num_gpus
    together with an address, so num_cpus stays null (the cluster's resources are its own). Without one,
    "local" starts a cluster of VERL's own on the GPUs this process sees, even where RAY_ADDRESS or a
    `ray start` cluster on this node would have been joined (ray 2.60 _private/services.py:686-708,
    _private/worker.py:1686-1689); its raylet starts the workers with this Python, train.grpo.python's
    (_private/services.py:1814-1817), not the core environment's that the chain's own Ray runs. Its Ray gets
    `gpus` GPUs, the first ones this process sees: a worker's devices are indices into the visible list
    (_private/worker.py:1155-1163), so a device listed after them (the reward judge's, which a chain's GRPO
    stage sees last) is never given to a worker."""
    if address:
        return [f"+ray_kwargs.ray_init.address={value(address)}", "ray_kwargs.ray_init.num_cpus=null"]
    return ["+ray_kwargs.ray_init.address=local", f"+ray_kwargs.ray_init.num_gpus={gpus}"]


def curriculum_overrides() -> list[str]:
    """Select the curriculum trainer. main_ppo looks the class up inside its TaskRunner, a Ray actor, so
    Ray's worker_process_setup_hook registers it in the workers (the driver never looks it up)."""
    return [
        f"trainer.v1.trainer_mode={value(verl_trainer.TRAINER_NAME)}",
        f"{SETUP_HOOK}={value(verl_trainer.HOOK)}",
    ]


def overrides(g: Mapping[str, Any], reward: Mapping[str, Any] | None = None) -> list[str]:
    """The Hydra overrides for `python -m verl.trainer.main_ppo`, from train.grpo (+ train.reward);
    the inputs are checked first (grpo_engine.check_inputs)."""
    check_inputs(g)
    data = Path(g["rl_data_dir"]).resolve()
    checkpoints = Path(g["checkpoint_dir"]).resolve()
    old = g["verl_0_7_1"]
    o = {
        "algorithm.adv_estimator": "grpo",
        "data.train_files": str(data / "train.parquet"),
        "data.val_files": str(data / "val.parquet"),
        "data.train_batch_size": g["train_batch_size"],
        "data.max_prompt_length": g["max_prompt_length"],
        "data.max_response_length": g["max_response_length"],
        "actor_rollout_ref.model.path": g["model"],
        f"{A}.optim.lr": g["lr"],
        f"{A}.optim.lr_scheduler_type": g["lr_scheduler"],
        f"{A}.optim.lr_warmup_steps_ratio": g["warmup_ratio"],
        f"{A}.optim.weight_decay": g["weight_decay"],
        f"{A}.optim.betas": list(g["betas"]),
        f"{A}.optim.clip_grad": g["grad_clip"],
        f"{A}.grad_clip": g["grad_clip"],
        f"{A}.ppo_mini_batch_size": g["ppo_mini_batch_size"],
        f"{A}.ppo_micro_batch_size_per_gpu": g["ppo_micro_batch_size_per_gpu"],
        f"{A}.loss_agg_mode": g["loss_agg_mode"],
        f"{A}.clip_ratio_low": g["clip_ratio"],
        f"{A}.clip_ratio_high": g["clip_ratio"],
        f"{A}.use_kl_loss": True,
        f"{A}.fsdp_config.seed": g["fsdp_seed"],
        f"{A}.data_loader_seed": g["data_loader_seed"],
        f"{A}.checkpoint.save_contents": list(g["save_contents"]),
        f"{A}.checkpoint.load_contents": list(g["save_contents"]),
        "actor_rollout_ref.ref.fsdp_config.seed": g["fsdp_seed"],
        "actor_rollout_ref.ref.fsdp_config.param_offload": g["ref_param_offload"],
        # 0.7.1's reference worker reads ref.use_torch_compile, 0.9.1's FSDP engine its fsdp_config's
        "actor_rollout_ref.ref.use_torch_compile": g["ref_torch_compile"],
        "actor_rollout_ref.ref.fsdp_config.use_torch_compile": g["ref_torch_compile"],
        f"{A}.kl_loss_type": g["kl_loss_type"],
        f"{A}.kl_loss_coef": g["kl_loss_coef"],
        "actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu": g["log_prob_micro_batch_size_per_gpu"],
        f"{R}.log_prob_micro_batch_size_per_gpu": g["log_prob_micro_batch_size_per_gpu"],
        f"{R}.name": g["rollout_name"],
        f"{R}.tensor_model_parallel_size": g["rollout_tp"],
        f"{R}.n": g["rollout_n"],
        f"{R}.temperature": g["temperature"],
        f"{R}.top_p": g["top_p"],
        f"{R}.max_num_seqs": old["rollout_max_num_seqs"],
        f"{R}.seed": old["rollout_seed"],
        f"{R}.calculate_log_probs": old["rollout_calculate_log_probs"],
        "reward.custom_reward_function.path": g["reward_path"],
        "reward.custom_reward_function.name": g["reward_name"],
        "trainer.n_gpus_per_node": g["n_gpus_per_node"],
        "trainer.nnodes": g["nnodes"],
        "trainer.total_epochs": g["total_epochs"],
        "trainer.test_freq": g["test_freq"],
        "trainer.val_before_train": g["val_before_train"],
        "trainer.save_freq": g["save_freq"],
        "trainer.max_actor_ckpt_to_keep": g["max_actor_ckpt_to_keep"],
        "trainer.default_local_dir": str(checkpoints),
        "trainer.resume_mode": g["resume_mode"],
        "trainer.project_name": g["project_name"] or "lazymem",
        "trainer.experiment_name": g["experiment_name"],
        "trainer.logger": list(g["logger"]),
    }
    out = [f"{k}={value(v)}" for k, v in o.items()]
    if reward is not None:
        out += reward_kwargs(reward, checkpoints)
    if g["curriculum"]:
        out += curriculum_overrides()
    out += ray_overrides(g.get("ray_address"), int(g["n_gpus_per_node"]))  # a local Ray is one node
    # the prompts' thinking switch, read by RLHFDataset and the agent loop (verl 0.9.1 trainer/config/
    # data/legacy_data.yaml:119, utils/dataset/rl_dataset.py:120-250, experimental/agent_loop/
    # agent_loop.py:242-251)
    if g.get("enable_thinking") is not None:
        out.append(f"+data.apply_chat_template_kwargs.enable_thinking={value(bool(g['enable_thinking']))}")
    return out + [str(x) for x in g.get("extra_overrides") or []]


def command(ovr: list[str], python: str | None = None) -> list[str]:
    """VERL's entry point run by `python` (the RL environment's; None: this Python)."""
    return [python or sys.executable, "-m", "verl.trainer.main_ppo", *ovr]
