"""GRPO overrides: Table 10's values under VERL 0.9.1's key names, checked by composing VERL's own
ppo_trainer config with them and running its validate_config."""

from __future__ import annotations

import importlib

import pytest
from hydra.core.override_parser.overrides_parser import OverridesParser
from omegaconf import OmegaConf

from lazymem.train.grpo.verl import trainer as verl_trainer
from lazymem.train.grpo.verl.engine import VerlEngine
from lazymem.train.grpo.verl.overrides import overrides, reward_workers, value

from helpers_train import JUDGE_LLM, compose_verl, grpo_cfg, reward_cfg


def test_value_quoting():
    assert value(True) == "true" and value(None) == "null" and value(1e-6) == "1e-06"
    assert value("pkg://lazymem.train.grpo.reward") == '"pkg://lazymem.train.grpo.reward"'
    assert value([0.9, 0.999]) == "[0.9,0.999]" and value("token-mean") == "token-mean"
    assert value({"a": {"b": None}, "c": "<x>"}) == '{a:{b:null},c:"<x>"}' and value("256") == '"256"'
    parsed = OverridesParser.create().parse_override(f"+k={value(JUDGE_LLM)}").value()
    assert parsed == JUDGE_LLM  # a role config survives the trip through Hydra's override grammar
    with pytest.raises(ValueError, match="Hydra override"):
        value({"a b": 1})


def test_overrides_need_rl_data_dir(tmp_path):
    with pytest.raises(ValueError, match="rl_data_dir"):
        overrides(grpo_cfg(tmp_path, rl_data_dir=None))


def test_overrides_need_the_sft_checkpoint(tmp_path):
    """No fallback to the base model: RL starts from the SFT checkpoint (Table 10)."""
    with pytest.raises(ValueError, match="SFT checkpoint"):
        overrides(grpo_cfg(tmp_path, model=None))
    assert "actor_rollout_ref.model.path=/models/sft" in overrides(grpo_cfg(tmp_path))


def test_d3_settings_and_verl_0_7_1_defaults_are_explicit(tmp_path):
    lines = set(overrides(grpo_cfg(tmp_path)))
    expected = {
        # D.3
        "actor_rollout_ref.actor.fsdp_config.seed=42",
        "actor_rollout_ref.ref.fsdp_config.seed=42",
        "actor_rollout_ref.actor.data_loader_seed=42",
        "actor_rollout_ref.ref.fsdp_config.param_offload=true",
        "actor_rollout_ref.ref.use_torch_compile=false",
        "actor_rollout_ref.ref.fsdp_config.use_torch_compile=false",
        "actor_rollout_ref.actor.checkpoint.save_contents=[model,optimizer,extra]",
        # VERL 0.7.1's values where 0.9.1 changed the default
        "actor_rollout_ref.rollout.max_num_seqs=1024",
        "actor_rollout_ref.rollout.seed=0",
        "actor_rollout_ref.rollout.calculate_log_probs=false",
    }
    assert expected <= lines


def test_verls_reward_workers_are_set_and_an_extra_override_of_them_is_counted(tmp_path):
    """VERL's reward.num_workers (the processes that await the reward, each calling the quality judge with the
    role's concurrency: grpo/judge_load.py) comes from train.grpo.reward_workers, and the engine reports what
    VERL gets: an extra override of the key later on the command line wins."""
    g = grpo_cfg(tmp_path, reward_workers=3)
    assert "reward.num_workers=3" in overrides(g) and reward_workers(g) == 3
    assert VerlEngine().launch(g, None, tmp_path).reward_loops == 3
    extra = ["reward.num_workers=5", "++reward.num_workers=2"]
    g = grpo_cfg(tmp_path, reward_workers=3, extra_overrides=extra)
    assert reward_workers(g) == 2 and VerlEngine().launch(g, None, tmp_path).reward_loops == 2


def validate(config) -> None:
    from verl.trainer.ppo.utils import need_critic, need_reference_policy
    from verl.utils.config import validate_config

    validate_config(
        config, use_reference_policy=need_reference_policy(config), use_critic=need_critic(config)
    )


@pytest.mark.slow
def test_verl_composes_and_validates_table_10(tmp_path):
    pytest.importorskip("verl")
    assert not [o for o in overrides(grpo_cfg(tmp_path), None) if "apply_chat_template_kwargs" in o]
    # the SFT model's thinking switch (train_grpo reads it from the SFT run) reaches VERL's prompt formatting
    config = compose_verl(overrides(grpo_cfg(tmp_path, enable_thinking=False), reward_cfg(tmp_path)))
    assert config.data.apply_chat_template_kwargs == {"enable_thinking": False}
    actor, rollout = config.actor_rollout_ref.actor, config.actor_rollout_ref.rollout
    assert config.algorithm.adv_estimator == "grpo" and actor.loss_agg_mode == "token-mean"
    assert actor.use_kl_loss and actor.kl_loss_type == "low_var_kl" and actor.kl_loss_coef == 0.001
    assert actor.clip_ratio_low == actor.clip_ratio_high == 0.2
    assert (actor.optim.lr, actor.optim.lr_scheduler_type, actor.optim.lr_warmup_steps_ratio) == (
        1e-6,
        "constant",
        0.0,
    )
    assert actor.optim.weight_decay == 0.01 and actor.optim.clip_grad == 1.0
    assert (config.data.train_batch_size, actor.ppo_mini_batch_size, actor.ppo_micro_batch_size_per_gpu) == (
        32,
        16,
        4,
    )
    assert (rollout.n, rollout.temperature, rollout.top_p, rollout.tensor_model_parallel_size) == (
        8,
        0.9,
        0.95,
        1,
    )
    assert (config.data.max_prompt_length, config.data.max_response_length) == (8192, 3072)
    assert rollout.prompt_length == 8192 and rollout.response_length == 3072
    t = config.trainer
    assert (t.total_epochs, t.test_freq, t.val_before_train, t.save_freq, t.max_actor_ckpt_to_keep) == (
        3,
        10,
        True,
        30,
        5,
    )
    assert t.n_gpus_per_node == 2 and t.resume_mode == "auto"
    # D.3 and the VERL 0.7.1 defaults, as VERL's own config holds them
    ref = config.actor_rollout_ref.ref
    assert actor.fsdp_config.seed == ref.fsdp_config.seed == actor.data_loader_seed == 42
    assert (
        ref.fsdp_config.param_offload and not ref.use_torch_compile and not ref.fsdp_config.use_torch_compile
    )
    assert (
        list(actor.checkpoint.save_contents)
        == list(actor.checkpoint.load_contents)
        == [
            "model",
            "optimizer",
            "extra",
        ]
    )
    assert (rollout.max_num_seqs, rollout.seed, rollout.calculate_log_probs) == (1024, 0, False)
    assert config.data.train_files == str(tmp_path.resolve() / "train.parquet")
    crf = config.reward.custom_reward_function
    assert (crf.path, crf.name) == ("pkg://lazymem.train.grpo.reward", "compute_score_async")
    kw = crf.reward_kwargs
    assert kw.eta == 0.915 and kw.curriculum_state == str(tmp_path / "state.json")
    assert OmegaConf.to_container(kw.judge.llm) == JUDGE_LLM  # the role config arrives whole
    # the curriculum trainer, its registration hook, and its settings read from the reward kwargs
    assert config.trainer.v1.trainer_mode == verl_trainer.TRAINER_NAME
    assert config.ray_kwargs.ray_init.runtime_env.worker_process_setup_hook == verl_trainer.HOOK
    assert (kw.tau, kw.lam_phase1, kw.lam_phase2) == (0.99, 0.0, 0.5)
    cur = verl_trainer.curriculum_from_config(config)
    assert (cur.path, cur.tau, cur.lam_phase1, cur.lam_phase2) == (tmp_path / "state.json", 0.99, 0.0, 0.5)
    assert config.reward.num_workers == reward_workers(grpo_cfg(tmp_path))  # what judge_load counts
    extra = grpo_cfg(tmp_path, extra_overrides=["reward.num_workers=5", "++reward.num_workers=2"])
    assert compose_verl(overrides(extra)).reward.num_workers == reward_workers(extra) == 2  # the last wins
    validate(config)
    validate(compose_verl(overrides(grpo_cfg(tmp_path, n_gpus_per_node=1))))
    plain = compose_verl(overrides(grpo_cfg(tmp_path, curriculum=False), reward_cfg(tmp_path)))
    assert plain.trainer.v1.trainer_mode == "sync"  # VERL's default
    assert "worker_process_setup_hook" not in plain.ray_kwargs.ray_init.runtime_env
    validate(plain)


@pytest.mark.slow
@pytest.mark.parametrize("change", [{"ppo_mini_batch_size": 64}, {"n_gpus_per_node": 3}])
def test_verl_rejects_inconsistent_batches(tmp_path, change):
    """VERL 0.9.1 rejects a mini-batch above the batch and a rollout batch not divisible by the GPUs."""
    pytest.importorskip("verl")
    with pytest.raises((AssertionError, ValueError)):
        validate(compose_verl(overrides(grpo_cfg(tmp_path, **change))))


def test_curriculum_switch(tmp_path):
    on = overrides(grpo_cfg(tmp_path, extra_overrides=["trainer.v1.trainer_mode=sync"]), reward_cfg(tmp_path))
    hook = (
        "+ray_kwargs.ray_init.runtime_env.worker_process_setup_hook="
        "lazymem.train.grpo.verl.trainer.setup_worker"
    )
    assert "trainer.v1.trainer_mode=lazymem_curriculum" in on and hook in on
    assert "+reward.custom_reward_function.reward_kwargs.tau=0.99" in on
    assert on[-1] == "trainer.v1.trainer_mode=sync"  # extra_overrides come last, so they can override
    off = overrides(grpo_cfg(tmp_path, curriculum=False), reward_cfg(tmp_path))
    assert not any("trainer_mode" in x or "setup_hook" in x for x in off)
    assert "+reward.custom_reward_function.reward_kwargs.tau=0.99" in off  # the reward kwargs stay
    # the hook as Ray loads it (ray._common.utils.load_class): module path, then attribute
    module, _, name = verl_trainer.HOOK.rpartition(".")
    assert getattr(importlib.import_module(module), name) is verl_trainer.setup_worker


@pytest.mark.slow
def test_reward_accepts_the_composed_reward_kwargs(tmp_path):
    """The reward_kwargs reach compute_score_async as keyword arguments (VERL's get_custom_reward_fn)."""
    pytest.importorskip("verl")
    import asyncio
    import json

    from verl.trainer.ppo.reward import get_custom_reward_fn

    from lazymem.train.grpo.rl_rows import ground_truth_json

    fn = get_custom_reward_fn(compose_verl(overrides(grpo_cfg(tmp_path), reward_cfg(tmp_path))))
    msgs = [{"role": "user", "content": f"m{i}", "timestamp": "2023/05/01"} for i in range(2)]
    truth = ground_truth_json(query="q", query_time="t", messages=msgs, gold=[True, False], answer="a")
    reply = json.dumps(
        [{"op": op, "compressed_content": c, "reason": ""} for op, c in (("KEEP", "c"), ("DROP", ""))]
    )
    out = asyncio.run(fn(data_source="lazymem", solution_str=reply, ground_truth=truth, extra_info={}))
    assert out["format_ok"] == 1.0 and out["phase"] == 1 and out["score"] == 1.0


def test_mini_batch_must_divide_the_batch(tmp_path):
    """VERL 0.9.1 lets 32 prompts / mini-batch 12 through; we refuse it before launching."""
    with pytest.raises(ValueError, match="divide"):
        overrides(grpo_cfg(tmp_path, ppo_mini_batch_size=12))


def test_checkpoints_and_the_curriculum_state_share_a_directory(tmp_path):
    g = grpo_cfg(tmp_path, checkpoint_dir=str(tmp_path / "ckpt"))
    r = reward_cfg(tmp_path)
    r["curriculum"]["state_path"] = None  # the default: next to the checkpoints of this training run
    lines = overrides(g, r)
    assert f"trainer.default_local_dir={tmp_path / 'ckpt'}" in lines
    state = tmp_path / "ckpt" / "curriculum_state.json"
    assert f"+reward.custom_reward_function.reward_kwargs.curriculum_state={state}" in lines
    r["curriculum"]["state_path"] = str(tmp_path / "elsewhere.json")
    assert any(x.endswith("curriculum_state=" + str(tmp_path / "elsewhere.json")) for x in overrides(g, r))


def test_default_checkpoint_dir_names_the_experiment(tmp_path):
    g = grpo_cfg(tmp_path)
    assert g["checkpoint_dir"] == "checkpoints/grpo"
    assert "trainer.project_name=lazymem" in overrides(g)
