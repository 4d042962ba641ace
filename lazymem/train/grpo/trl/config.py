"""The TRL 1.16 engine's settings: Table 10 under GRPOConfig's names, and everything run.py reads.

Table 10's values map to GRPOConfig names where TRL has one (:func:`grpo_args`; what does not map is in
docs/fidelity.md, "GRPO with TRL"). TRL counts optimiser steps where VERL counts batches: one VERL step
samples train_batch_size prompts x rollout_n rollouts and takes train_batch_size / ppo_mini_batch_size
optimiser steps on them, which in TRL is one generation batch (``steps_per_generation`` micro-batches of
``per_device_train_batch_size`` completions) split into gradient-accumulated updates of ppo_mini_batch_size
prompts. So test_freq and save_freq, in VERL steps, become eval_steps and save_steps in optimiser steps.
The settings go to trl_config.json in the run directory (engine.py).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from lazymem.train.grpo.engine import reward_settings


def updates_per_batch(grpo: Mapping[str, Any]) -> int:
    """Optimiser steps per batch of prompts (VERL's PPO mini-batches per step: D.3's 32 / 16 = 2)."""
    return int(grpo["train_batch_size"]) // int(grpo["ppo_mini_batch_size"])


def grpo_args(grpo: Mapping[str, Any]) -> dict[str, Any]:
    """GRPOConfig keyword arguments (trl/trainer/grpo_config.py, transformers' TrainingArguments) for one
    process; ValueError when the batch keys do not divide into whole micro-batches."""
    micro, n = int(grpo["per_device_train_batch_size"]), int(grpo["rollout_n"])
    per_update, per_batch = int(grpo["ppo_mini_batch_size"]) * n, int(grpo["train_batch_size"]) * n
    if per_update % micro:
        raise ValueError(
            f"per_device_train_batch_size {micro} must divide ppo_mini_batch_size x rollout_n = {per_update} "
            "completions (one optimiser step)"
        )
    if int(grpo["per_device_eval_batch_size"]) % int(grpo["val_rollouts"]):
        raise ValueError("val_rollouts must divide per_device_eval_batch_size (whole groups per batch)")
    k = updates_per_batch(grpo)
    cpu = int(grpo["n_gpus_per_node"]) == 0
    return {
        "output_dir": str(Path(grpo["checkpoint_dir"]).resolve()),
        "run_name": grpo["experiment_name"],
        "seed": grpo["seed"],
        "data_seed": grpo["seed"],
        "use_cpu": cpu,
        # bf16 is autocast (transformers' TrainingArguments.bf16); the weights AdamW updates stay fp32 (N20):
        # in bf16 (8 mantissa bits) a 1e-6 step rounds away on any weight above ~3e-4. A full fine-tune loads
        # fp32; LoRA may load the frozen base in bf16, since peft upcasts the adapter to fp32 unless ZeRO-3
        # (trl 1.16 grpo_trainer.py:450-476, get_peft_model's autocast_adapter_dtype=True)
        "bf16": bool(grpo["bf16"]),
        "model_init_kwargs": {"dtype": weights_dtype(grpo)},
        "gradient_checkpointing": bool(grpo["gradient_checkpointing"]),
        # the optimiser (Table 10): AdamW, constant lr, no warmup (transformers 5.10 takes a ratio < 1 in
        # warmup_steps, training_args.py:775), weight decay, gradient clip
        "optim": "adamw_torch",
        "learning_rate": grpo["lr"],
        "lr_scheduler_type": grpo["lr_scheduler"],
        "warmup_steps": grpo["warmup_ratio"],
        "adam_beta1": grpo["betas"][0],
        "adam_beta2": grpo["betas"][1],
        "weight_decay": grpo["weight_decay"],
        "max_grad_norm": grpo["grad_clip"],
        # GRPO's loss: symmetric clip, KL to the reference, token-level normalisation (loss_type)
        "epsilon": grpo["clip_ratio"],
        "epsilon_high": grpo["clip_ratio"],
        "beta": grpo["kl_loss_coef"],
        # VERL's low_var_kl is k3 on the reference alone; trl 1.16's default multiplies it by the importance
        # ratio (grpo_config.py:972, grpo_trainer.py:3104-3105), a term VERL does not have (N19)
        "use_bias_correction_kl": False,
        "loss_type": grpo["loss_type"],
        "scale_rewards": "group",  # VERL's GRPO advantage: (r - group mean) / group std
        # rollouts (Table 10); top_k 0 = off, as VERL's -1
        "num_generations": grpo["rollout_n"],
        "temperature": grpo["temperature"],
        "top_p": grpo["top_p"],
        "top_k": 0,
        # the prompts formatted as the SFT data was (trl 1.16 grpo_config.py:108, passed to every
        # apply_chat_template of grpo_trainer.py)
        "chat_template_kwargs": (
            {} if grpo.get("enable_thinking") is None else {"enable_thinking": bool(grpo["enable_thinking"])}
        ),
        "max_completion_length": grpo["max_response_length"],
        # the batch: train_batch_size prompts x rollout_n per generation, updates of ppo_mini_batch_size
        "per_device_train_batch_size": micro,
        "gradient_accumulation_steps": per_update // micro,
        "steps_per_generation": per_batch // micro,
        "num_iterations": 1,  # each batch trained on once (VERL's ppo_epochs 1)
        "num_train_epochs": grpo["total_epochs"],
        "max_steps": -1 if grpo.get("max_steps") is None else int(grpo["max_steps"]),
        # validation (before training and every test_freq batches) and checkpoints (every save_freq)
        "eval_strategy": "steps",
        "eval_steps": int(grpo["test_freq"]) * k,
        "eval_on_start": bool(grpo["val_before_train"]),
        "per_device_eval_batch_size": grpo["per_device_eval_batch_size"],
        "num_generations_eval": grpo["val_rollouts"],
        "save_strategy": "steps",
        "save_steps": int(grpo["save_freq"]) * k,
        "save_total_limit": grpo["max_actor_ckpt_to_keep"],
        "save_only_model": False,  # model, optimiser and trainer state: a resume continues exactly
        "logging_steps": 1,
        "report_to": ["wandb"] if grpo.get("reports") else "none",
        "use_vllm": bool(grpo["use_vllm"]),
        # off (N18; VERL has no such correction): trl 1.16 defaults it on (grpo_config.py:925) and multiplies
        # the loss by exp(sum of trainer - vLLM log-probs) per sequence (grpo_trainer.py:2660-2670, 3146),
        # but vLLM's log-probs are taken after top-p and the trainer's over the whole vocabulary, so the ratio
        # of a long reply is far from 1 and scales its policy gradient towards 0 (sequence_mask drops it).
        # Without it the trainer still recomputes the old log-probs of the second update of a batch
        # (grpo_trainer.py:2642: gradient_accumulation_steps % steps_per_generation != 0), as VERL does.
        # log_sampling_mismatch turns it on for a first GPU run's check: TRL logs the ratio only then
        # (grpo_trainer.py:2860-2896)
        "vllm_importance_sampling_correction": bool(grpo.get("log_sampling_mismatch")),
        "vllm_mode": grpo["vllm_mode"],
        "vllm_gpu_memory_utilization": grpo["vllm_gpu_memory_utilization"],
        "vllm_enable_sleep_mode": bool(grpo["vllm_enable_sleep_mode"]),
        "vllm_max_model_length": int(grpo["max_prompt_length"]) + int(grpo["max_response_length"]),
    }


def weights_dtype(grpo: Mapping[str, Any]) -> str:
    """The dtype the policy's weights load in: bf16 only for a LoRA base (frozen), fp32 otherwise (N20)."""
    return "bfloat16" if grpo["bf16"] and grpo["lora"]["enabled"] else "float32"


def lora_args(grpo: Mapping[str, Any]) -> dict[str, Any] | None:
    """peft.LoraConfig keyword arguments, or None for a full fine-tune."""
    lora = grpo["lora"]
    if not lora["enabled"]:
        return None
    return {
        "r": lora["r"],
        "lora_alpha": lora["alpha"],
        "lora_dropout": lora["dropout"],
        "target_modules": lora["target_modules"],
        "task_type": "CAUSAL_LM",
    }


def trl_config(grpo: Mapping[str, Any], reward: Mapping[str, Any] | None) -> dict[str, Any]:
    """Everything `python -m lazymem.train.grpo.trl.run` reads (trl_config.json)."""
    if reward is None:
        raise ValueError("the TRL engine needs train.reward (conf/train/reward.yaml) for its reward")
    data = Path(grpo["rl_data_dir"]).resolve()
    return {
        "model": grpo["model"],
        "train_file": str(data / "train.parquet"),
        "val_file": str(data / "val.parquet"),
        "checkpoint_dir": str(Path(grpo["checkpoint_dir"]).resolve()),
        "curriculum": bool(grpo["curriculum"]),
        "policy_check_step": int(grpo["policy_check_step"]),
        "reward": reward_settings(reward, grpo["checkpoint_dir"]),
        "args": grpo_args(grpo),
        "lora": lora_args(grpo),
    }
