"""Table 10 under TRL 1.16's names (lazymem/train/grpo/trl/config.py), checked by building GRPOConfig
itself."""

from __future__ import annotations

import pytest

from lazymem.train.grpo.trl.config import grpo_args, lora_args, trl_config

from helpers_train import GRPO_TRL, grpo_cfg, reward_cfg


def test_table_10_maps_to_grpo_config_with_verls_batch_shape(tmp_path):
    pytest.importorskip("trl")
    from trl import GRPOConfig

    g = grpo_cfg(tmp_path, engine=GRPO_TRL)
    args = GRPOConfig(**{**grpo_args(g), "use_cpu": True, "bf16": False, "use_vllm": False})
    assert (args.learning_rate, args.lr_scheduler_type, args.warmup_steps) == (1e-6, "constant", 0.0)
    assert (args.adam_beta1, args.adam_beta2, args.weight_decay, args.max_grad_norm) == (
        0.9,
        0.999,
        0.01,
        1.0,
    )
    assert (args.epsilon, args.epsilon_high, args.beta, args.loss_type) == (0.2, 0.2, 0.001, "dapo")
    assert (args.num_generations, args.temperature, args.top_p, args.max_completion_length) == (
        8,
        0.9,
        0.95,
        3072,
    )
    # 32 prompts x 8 rollouts per generation, optimiser steps of 16 prompts x 8 in micro-batches of 4
    assert args.generation_batch_size == 32 * 8 and args.steps_per_generation == 64
    assert args.per_device_train_batch_size * args.gradient_accumulation_steps == 16 * 8
    # VERL's steps (batches) are two optimiser steps each: validate every 10, save every 30, keep 5
    assert (args.eval_steps, args.save_steps, args.save_total_limit, args.eval_on_start) == (20, 60, 5, True)
    assert args.num_train_epochs == 3 and args.seed == 42 and args.num_generations_eval == 1
    assert args.chat_template_kwargs == {}  # the template's default unless the SFT model says otherwise
    assert grpo_args({**g, "enable_thinking": False})["chat_template_kwargs"] == {"enable_thinking": False}
    assert lora_args(g)["r"] == 64 and lora_args({**g, "lora": {**g["lora"], "enabled": False}}) is None


def test_micro_batches_must_divide_an_update(tmp_path):
    with pytest.raises(ValueError, match="per_device_train_batch_size 3 must divide"):
        grpo_args(grpo_cfg(tmp_path, engine=GRPO_TRL, per_device_train_batch_size=3))


def test_the_loss_is_verls_not_trls_defaults(tmp_path):
    """trl 1.16 defaults (grpo_config.py:925, :972) that VERL does not have are off; a full fine-tune keeps
    fp32 weights under bf16 autocast while a LoRA base may load in bf16 (peft upcasts the adapter)."""
    pytest.importorskip("trl")
    from trl import GRPOConfig

    trl_default = GRPOConfig(output_dir=str(tmp_path), use_cpu=True, bf16=False)
    assert trl_default.vllm_importance_sampling_correction and trl_default.use_bias_correction_kl
    g = grpo_cfg(tmp_path, engine=GRPO_TRL)
    args = GRPOConfig(**{**grpo_args(g), "use_cpu": True, "bf16": False, "use_vllm": False})
    assert args.vllm_importance_sampling_correction is False and args.use_bias_correction_kl is False
    # a first GPU run's check turns TRL's correction on, the only way TRL logs the ratio
    assert grpo_args({**g, "log_sampling_mismatch": True})["vllm_importance_sampling_correction"] is True
    assert grpo_args(g)["bf16"] and grpo_args(g)["model_init_kwargs"] == {"dtype": "bfloat16"}  # LoRA
    full = {**g, "lora": {**g["lora"], "enabled": False}}
    assert grpo_args(full)["bf16"] and grpo_args(full)["model_init_kwargs"] == {"dtype": "float32"}
    assert grpo_args({**full, "bf16": False})["model_init_kwargs"] == {"dtype": "float32"}
    assert trl_config(g, reward_cfg(tmp_path))["policy_check_step"] == 4
