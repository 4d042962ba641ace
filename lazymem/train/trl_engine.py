"""The TRL 1.16 engine of task=train_grpo: GRPOTrainer in one subprocess (`python -m lazymem.train.trl_grpo`).

Table 10's values map to GRPOConfig names where TRL has one (:func:`grpo_args`; what does not map is in
docs/fidelity.md, "GRPO with TRL"). TRL counts optimiser steps where VERL counts batches: one VERL step
samples train_batch_size prompts x rollout_n rollouts and takes train_batch_size / ppo_mini_batch_size
optimiser steps on them, which in TRL is one generation batch (``steps_per_generation`` micro-batches of
``per_device_train_batch_size`` completions) split into gradient-accumulated updates of ppo_mini_batch_size
prompts. So test_freq and save_freq, in VERL steps, become eval_steps and save_steps in optimiser steps.
The settings go to trl_config.json in the run directory; checkpoints are ``checkpoint-N/`` (HF Trainer).
"""

from __future__ import annotations

import json
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from lazymem.train.checkpoint_disk import trl_need
from lazymem.train.grpo_engine import Launch, reward_settings

CONFIG = "trl_config.json"


def updates_per_batch(g: Mapping[str, Any]) -> int:
    """Optimiser steps per batch of prompts (VERL's PPO mini-batches per step: D.3's 32 / 16 = 2)."""
    return int(g["train_batch_size"]) // int(g["ppo_mini_batch_size"])


def grpo_args(g: Mapping[str, Any]) -> dict[str, Any]:
    """GRPOConfig keyword arguments (trl/trainer/grpo_config.py, transformers' TrainingArguments) for one
    process; ValueError when the batch keys do not divide into whole micro-batches."""
    micro, n = int(g["per_device_train_batch_size"]), int(g["rollout_n"])
    per_update, per_batch = int(g["ppo_mini_batch_size"]) * n, int(g["train_batch_size"]) * n
    if per_update % micro:
        raise ValueError(
            f"per_device_train_batch_size {micro} must divide ppo_mini_batch_size x rollout_n = {per_update} "
            "completions (one optimiser step)"
        )
    if int(g["per_device_eval_batch_size"]) % int(g["val_rollouts"]):
        raise ValueError("val_rollouts must divide per_device_eval_batch_size (whole groups per batch)")
    k = updates_per_batch(g)
    cpu = int(g["n_gpus_per_node"]) == 0
    return {
        "output_dir": str(Path(g["checkpoint_dir"]).resolve()),
        "run_name": g["experiment_name"],
        "seed": g["seed"],
        "data_seed": g["seed"],
        "use_cpu": cpu,
        # bf16 is autocast (transformers' TrainingArguments.bf16); the weights AdamW updates stay fp32 (N20):
        # in bf16 (8 mantissa bits) a 1e-6 step rounds away on any weight above ~3e-4. A full fine-tune loads
        # fp32; LoRA may load the frozen base in bf16, since peft upcasts the adapter to fp32 unless ZeRO-3
        # (trl 1.16 grpo_trainer.py:450-476, get_peft_model's autocast_adapter_dtype=True)
        "bf16": bool(g["bf16"]),
        "model_init_kwargs": {"dtype": weights_dtype(g)},
        "gradient_checkpointing": bool(g["gradient_checkpointing"]),
        # the optimiser (Table 10): AdamW, constant lr, no warmup (transformers 5.10 takes a ratio < 1 in
        # warmup_steps, training_args.py:775), weight decay, gradient clip
        "optim": "adamw_torch",
        "learning_rate": g["lr"],
        "lr_scheduler_type": g["lr_scheduler"],
        "warmup_steps": g["warmup_ratio"],
        "adam_beta1": g["betas"][0],
        "adam_beta2": g["betas"][1],
        "weight_decay": g["weight_decay"],
        "max_grad_norm": g["grad_clip"],
        # GRPO's loss: symmetric clip, KL to the reference, token-level normalisation (loss_type)
        "epsilon": g["clip_ratio"],
        "epsilon_high": g["clip_ratio"],
        "beta": g["kl_loss_coef"],
        # VERL's low_var_kl is k3 on the reference alone; trl 1.16's default multiplies it by the importance
        # ratio (grpo_config.py:972, grpo_trainer.py:3104-3105), a term VERL does not have (N19)
        "use_bias_correction_kl": False,
        "loss_type": g["loss_type"],
        "scale_rewards": "group",  # VERL's GRPO advantage: (r - group mean) / group std
        # rollouts (Table 10); top_k 0 = off, as VERL's -1
        "num_generations": g["rollout_n"],
        "temperature": g["temperature"],
        "top_p": g["top_p"],
        "top_k": 0,
        # the prompts formatted as the SFT data was (trl 1.16 grpo_config.py:108, passed to every
        # apply_chat_template of grpo_trainer.py)
        "chat_template_kwargs": (
            {} if g.get("enable_thinking") is None else {"enable_thinking": bool(g["enable_thinking"])}
        ),
        "max_completion_length": g["max_response_length"],
        # the batch: train_batch_size prompts x rollout_n per generation, updates of ppo_mini_batch_size
        "per_device_train_batch_size": micro,
        "gradient_accumulation_steps": per_update // micro,
        "steps_per_generation": per_batch // micro,
        "num_iterations": 1,  # each batch trained on once (VERL's ppo_epochs 1)
        "num_train_epochs": g["total_epochs"],
        "max_steps": -1 if g.get("max_steps") is None else int(g["max_steps"]),
        # validation (before training and every test_freq batches) and checkpoints (every save_freq)
        "eval_strategy": "steps",
        "eval_steps": int(g["test_freq"]) * k,
        "eval_on_start": bool(g["val_before_train"]),
        "per_device_eval_batch_size": g["per_device_eval_batch_size"],
        "num_generations_eval": g["val_rollouts"],
        "save_strategy": "steps",
        "save_steps": int(g["save_freq"]) * k,
        "save_total_limit": g["max_actor_ckpt_to_keep"],
        "save_only_model": False,  # model, optimiser and trainer state: a resume continues exactly
        "logging_steps": 1,
        "report_to": ["wandb"] if g.get("reports") else "none",
        "use_vllm": bool(g["use_vllm"]),
        # off (N18; VERL has no such correction): trl 1.16 defaults it on (grpo_config.py:925) and multiplies
        # the loss by exp(sum of trainer - vLLM log-probs) per sequence (grpo_trainer.py:2660-2670, 3146),
        # but vLLM's log-probs are taken after top-p and the trainer's over the whole vocabulary, so the ratio
        # of a long reply is far from 1 and scales its policy gradient towards 0 (sequence_mask drops it).
        # Without it the trainer still recomputes the old log-probs of the second update of a batch
        # (grpo_trainer.py:2642: gradient_accumulation_steps % steps_per_generation != 0), as VERL does.
        # log_sampling_mismatch turns it on for a first GPU run's check: TRL logs the ratio only then
        # (grpo_trainer.py:2860-2896)
        "vllm_importance_sampling_correction": bool(g.get("log_sampling_mismatch")),
        "vllm_mode": g["vllm_mode"],
        "vllm_gpu_memory_utilization": g["vllm_gpu_memory_utilization"],
        "vllm_enable_sleep_mode": bool(g["vllm_enable_sleep_mode"]),
        "vllm_max_model_length": int(g["max_prompt_length"]) + int(g["max_response_length"]),
    }


def weights_dtype(g: Mapping[str, Any]) -> str:
    """The dtype the policy's weights load in: bf16 only for a LoRA base (frozen), fp32 otherwise (N20)."""
    return "bfloat16" if g["bf16"] and g["lora"]["enabled"] else "float32"


def lora_args(g: Mapping[str, Any]) -> dict[str, Any] | None:
    """peft.LoraConfig keyword arguments, or None for a full fine-tune."""
    lora = g["lora"]
    if not lora["enabled"]:
        return None
    return {
        "r": lora["r"],
        "lora_alpha": lora["alpha"],
        "lora_dropout": lora["dropout"],
        "target_modules": lora["target_modules"],
        "task_type": "CAUSAL_LM",
    }


def trl_config(g: Mapping[str, Any], reward: Mapping[str, Any] | None) -> dict[str, Any]:
    """Everything `python -m lazymem.train.trl_grpo` reads (trl_config.json)."""
    if reward is None:
        raise ValueError("the TRL engine needs train.reward (conf/train/reward.yaml) for its reward")
    data = Path(g["rl_data_dir"]).resolve()
    return {
        "model": g["model"],
        "train_file": str(data / "train.parquet"),
        "val_file": str(data / "val.parquet"),
        "checkpoint_dir": str(Path(g["checkpoint_dir"]).resolve()),
        "curriculum": bool(g["curriculum"]),
        "policy_check_step": int(g["policy_check_step"]),
        "reward": reward_settings(reward, g["checkpoint_dir"]),
        "args": grpo_args(g),
        "lora": lora_args(g),
    }


class TrlEngine:
    """GRPO on TRL's GRPOTrainer (the GrpoEngine contract, grpo_engine.py)."""

    name = "trl"

    def launch(self, g: Mapping[str, Any], reward: Mapping[str, Any] | None, run_dir: Path) -> Launch:
        config = trl_config(g, reward)
        path = Path(run_dir) / CONFIG
        path.write_text(json.dumps(config, indent=2) + "\n", encoding="utf-8")
        return Launch(
            command=[g.get("python") or sys.executable, "-m", "lazymem.train.trl_grpo", str(path)],
            log=Path(run_dir) / "trl.log",
            gpus=int(g["n_gpus_per_node"]),
            plan_gpus=True,
            rl_env=False,
            validates=True,  # the engine's callback logs every validation round, curriculum or not
            info={"config": str(path)},
            disk=trl_need(g),
        )
