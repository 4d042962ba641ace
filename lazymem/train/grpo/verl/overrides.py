"""VERL 0.9.1 overrides for the GRPO stage (paper Table 10), built from conf/train/grpo/verl.yaml
(+ conf/train/grpo/_common.yaml), and VERL's command line.

Key names were read from verl/trainer/config/_generated_ppo_trainer.yaml. Notes on the non-obvious ones:
`clip_ratio` alone does nothing (the loss reads clip_ratio_low/high); `ppo_mini_batch_size` counts
prompts; VERL defaults to 8 GPUs and rollout TP 2, hence explicit values; `rollout.name` has no default;
the train dataloader always drops the last partial batch (ray_trainer / v1 trainer_base), so no key.
With `curriculum` on, `trainer.v1.trainer_mode` selects lazymem's trainer (trainer.py beside this file),
which feeds each validation's format-valid rate to the reward curriculum. D.3's seeds, reference-model
offload / compile and checkpoint contents are set explicitly, and so are the VERL 0.7.1 defaults that 0.9.1
changed (`paper_verl_defaults`; the full comparison is docs/train_defaults.md).
"""

from __future__ import annotations

import json
import re
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from lazymem.train.grpo.engine import check_inputs, reward_settings
from lazymem.train.grpo.verl import trainer

ACTOR = "actor_rollout_ref.actor"
ROLLOUT = "actor_rollout_ref.rollout"
REWARD_KWARGS = "+reward.custom_reward_function.reward_kwargs"
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

    The curriculum trainer reads its settings here too (trainer.curriculum_from_config): one source.
    """
    settings = reward_settings(reward, checkpoint_dir)
    judge = settings.pop("judge")
    out = [f"{REWARD_KWARGS}.{k}={value(v)}" for k, v in settings.items()]
    out += [f"{REWARD_KWARGS}.judge.{k}={value(v)}" for k, v in judge.items()]
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


# VERL 0.9.1 computes a custom reward in `reward.num_workers` Ray actors (default 8:
# verl/trainer/config/reward/reward.yaml:5, verl/workers/config/reward.py:98), created by
# experimental/reward_loop/reward_loop.py:324-341 (RewardLoopWorker made a Ray actor at :308). Without a
# reward model they go to the agent loop (reward_loop_worker_handles, :312-322; trainer/ppo/v1/
# trainer_base.py:347, :409-410; main_ppo.py:130), which sends each rollout to a random one
# (experimental/agent_loop/agent_loop.py:1025-1026); each awaits our async compute_score on its own event
# loop (reward_loop.py:145-148, reward_manager/naive.py:30 and :66-73): an async Ray actor runs its calls on
# one loop, up to 1000 at once (ray 2.60 _common/ray_constants.py:2, actor.py:1941-1943). So the quality
# judge's client, whose `concurrency` holds per event loop, runs in this many loops at once.
_NUM_WORKERS = re.compile(r"^\+{0,2}reward\.num_workers=(\d+)$")


def reward_workers(grpo: Mapping[str, Any]) -> int:
    """VERL's reward loop workers: train.grpo.reward_workers, unless an extra override sets
    reward.num_workers after it (the last one holds)."""
    found = [m[1] for o in grpo.get("extra_overrides") or [] if (m := _NUM_WORKERS.match(str(o).strip()))]
    return int(found[-1]) if found else int(grpo["reward_workers"])


def curriculum_overrides() -> list[str]:
    """Select the curriculum trainer. main_ppo looks the class up inside its TaskRunner, a Ray actor, so
    Ray's worker_process_setup_hook registers it in the workers (the driver never looks it up)."""
    return [
        f"trainer.v1.trainer_mode={value(trainer.TRAINER_NAME)}",
        f"{SETUP_HOOK}={value(trainer.HOOK)}",
    ]


def overrides(grpo: Mapping[str, Any], reward: Mapping[str, Any] | None = None) -> list[str]:
    """The Hydra overrides for `python -m verl.trainer.main_ppo`, from train.grpo (+ train.reward);
    the inputs are checked first (engine.check_inputs)."""
    check_inputs(grpo)
    data = Path(grpo["rl_data_dir"]).resolve()
    checkpoints = Path(grpo["checkpoint_dir"]).resolve()
    paper_defaults = grpo["paper_verl_defaults"]
    keys = {
        "algorithm.adv_estimator": "grpo",
        "data.train_files": str(data / "train.parquet"),
        "data.val_files": str(data / "val.parquet"),
        "data.train_batch_size": grpo["train_batch_size"],
        "data.max_prompt_length": grpo["max_prompt_length"],
        "data.max_response_length": grpo["max_response_length"],
        "actor_rollout_ref.model.path": grpo["model"],
        f"{ACTOR}.optim.lr": grpo["lr"],
        f"{ACTOR}.optim.lr_scheduler_type": grpo["lr_scheduler"],
        f"{ACTOR}.optim.lr_warmup_steps_ratio": grpo["warmup_ratio"],
        f"{ACTOR}.optim.weight_decay": grpo["weight_decay"],
        f"{ACTOR}.optim.betas": list(grpo["betas"]),
        f"{ACTOR}.optim.clip_grad": grpo["grad_clip"],
        f"{ACTOR}.grad_clip": grpo["grad_clip"],
        f"{ACTOR}.ppo_mini_batch_size": grpo["ppo_mini_batch_size"],
        f"{ACTOR}.ppo_micro_batch_size_per_gpu": grpo["ppo_micro_batch_size_per_gpu"],
        f"{ACTOR}.loss_agg_mode": grpo["loss_agg_mode"],
        f"{ACTOR}.clip_ratio_low": grpo["clip_ratio"],
        f"{ACTOR}.clip_ratio_high": grpo["clip_ratio"],
        f"{ACTOR}.use_kl_loss": True,
        f"{ACTOR}.fsdp_config.seed": grpo["fsdp_seed"],
        f"{ACTOR}.data_loader_seed": grpo["data_loader_seed"],
        f"{ACTOR}.checkpoint.save_contents": list(grpo["save_contents"]),
        f"{ACTOR}.checkpoint.load_contents": list(grpo["save_contents"]),
        "actor_rollout_ref.ref.fsdp_config.seed": grpo["fsdp_seed"],
        "actor_rollout_ref.ref.fsdp_config.param_offload": grpo["ref_param_offload"],
        # 0.7.1's reference worker reads ref.use_torch_compile, 0.9.1's FSDP engine its fsdp_config's
        "actor_rollout_ref.ref.use_torch_compile": grpo["ref_torch_compile"],
        "actor_rollout_ref.ref.fsdp_config.use_torch_compile": grpo["ref_torch_compile"],
        f"{ACTOR}.kl_loss_type": grpo["kl_loss_type"],
        f"{ACTOR}.kl_loss_coef": grpo["kl_loss_coef"],
        "actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu": grpo["log_prob_micro_batch_size_per_gpu"],
        f"{ROLLOUT}.log_prob_micro_batch_size_per_gpu": grpo["log_prob_micro_batch_size_per_gpu"],
        f"{ROLLOUT}.name": grpo["rollout_name"],
        f"{ROLLOUT}.tensor_model_parallel_size": grpo["rollout_tp"],
        f"{ROLLOUT}.n": grpo["rollout_n"],
        f"{ROLLOUT}.temperature": grpo["temperature"],
        f"{ROLLOUT}.top_p": grpo["top_p"],
        f"{ROLLOUT}.max_num_seqs": paper_defaults["rollout_max_num_seqs"],
        f"{ROLLOUT}.seed": paper_defaults["rollout_seed"],
        f"{ROLLOUT}.calculate_log_probs": paper_defaults["rollout_calculate_log_probs"],
        "reward.custom_reward_function.path": grpo["reward_path"],
        "reward.custom_reward_function.name": grpo["reward_name"],
        "reward.num_workers": grpo["reward_workers"],
        "trainer.n_gpus_per_node": grpo["n_gpus_per_node"],
        "trainer.nnodes": grpo["nnodes"],
        "trainer.total_epochs": grpo["total_epochs"],
        "trainer.test_freq": grpo["test_freq"],
        "trainer.val_before_train": grpo["val_before_train"],
        "trainer.save_freq": grpo["save_freq"],
        "trainer.max_actor_ckpt_to_keep": grpo["max_actor_ckpt_to_keep"],
        "trainer.default_local_dir": str(checkpoints),
        "trainer.resume_mode": grpo["resume_mode"],
        "trainer.project_name": grpo["project_name"] or "lazymem",
        "trainer.experiment_name": grpo["experiment_name"],
        "trainer.logger": list(grpo["logger"]),
    }
    out = [f"{k}={value(v)}" for k, v in keys.items()]
    if reward is not None:
        out += reward_kwargs(reward, checkpoints)
    if grpo["curriculum"]:
        out += curriculum_overrides()
    out += ray_overrides(grpo.get("ray_address"), int(grpo["n_gpus_per_node"]))  # a local Ray is one node
    # the prompts' thinking switch, read by RLHFDataset and the agent loop (verl 0.9.1 trainer/config/
    # data/legacy_data.yaml:119, utils/dataset/rl_dataset.py:120-250, experimental/agent_loop/
    # agent_loop.py:242-251)
    if grpo.get("enable_thinking") is not None:
        out.append(f"+data.apply_chat_template_kwargs.enable_thinking={value(bool(grpo['enable_thinking']))}")
    return out + [str(x) for x in grpo.get("extra_overrides") or []]


def command(ovr: list[str], python: str | None = None) -> list[str]:
    """VERL's entry point run by `python` (the RL environment's; None: this Python)."""
    return [python or sys.executable, "-m", "verl.trainer.main_ppo", *ovr]
