"""GRPO with TRL on a CPU through the CLI (+experiment=train_grpo_cpu): a tiny Qwen3 taught the decision
format (helpers_train.format_taught_qwen3), the real reward (lazymem.train.grpo.reward), real optimiser steps.
Kind: what a user's `python -m lazymem.run +experiment=train_grpo_cpu ...` writes, resumes and chooses."""

from __future__ import annotations

import json
import shutil
import statistics

import pytest

from lazymem.train.checkpoint_select import SELECTED
from lazymem.train.grpo.checkpoints import read_validations
from lazymem.train.grpo.trl.callbacks import TRAIN_LOG, PolicyNotMoved
from lazymem.train.grpo.trl.run import newest_checkpoint

from helpers import run_cli
from helpers_train import format_taught_qwen3, sampled_reward, trl_train
from standin import StandinServer

torch = pytest.importorskip("torch")
pytest.importorskip("trl")


@pytest.fixture(scope="module")
def sft(tmp_path_factory):
    out = tmp_path_factory.mktemp("trl")
    return out, format_taught_qwen3(out)


def train(data, model, ckpt, run_dir, *overrides):
    proc = run_cli(
        "+experiment=train_grpo_cpu",
        f"train.grpo.rl_data_dir={data}",
        f"train.grpo.model={model}",
        f"train.grpo.checkpoint_dir={ckpt}",
        "train.grpo.weight_decay=0.0",  # a changed weight is the optimiser's doing, not decay's
        f"hydra.run.dir={run_dir}",
        *overrides,
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    return proc


def rows(path):
    return [json.loads(line) for line in path.read_text().splitlines()]


def weights(path):
    from safetensors.torch import load_file

    return load_file(str(path / "model.safetensors"))


def test_trl_grpo_trains_on_the_real_reward_and_chooses_a_loadable_checkpoint(sft, tmp_path):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    data, model = sft
    ckpt = tmp_path / "ckpt"
    train(data, model, ckpt, tmp_path / "run", "train.grpo.max_steps=2")  # one batch: two updates
    steps = rows(ckpt / TRAIN_LOG)
    assert [r["step"] for r in steps] == [1, 2]
    for r in steps:
        assert {"score", "format_ok", "r_act", "a_gold", "a_nongold", "lam", "phase"} <= set(r)
        assert (r["lam"], r["phase"]) == (0.0, 1.0)  # tau 0.99 not reached: phase 1, no judge
    # the batch mixes valid and invalid rollouts, so the rewards of its groups differ
    assert 0.0 < steps[0]["format_ok"] < 1.0 and steps[0]["score"] > 0.0
    rounds = read_validations(ckpt)
    assert sorted(rounds) == [0, 2]  # before training and after the batch (test_freq 1)
    assert all(r["format_ok"] < 0.99 for r in rounds.values())  # below tau: the curriculum stays
    assert json.loads((ckpt / "curriculum_state.json").read_text())["phase"] == 1
    choice = json.loads((ckpt / SELECTED).read_text())
    assert (choice["engine"], choice["step"], choice["adapter"]) == ("trl", 2, False)
    assert choice["path"] == str(ckpt / "checkpoint-2")
    before, after = weights(model), weights(ckpt / "checkpoint-2")
    assert any(not torch.equal(before[k], after[k]) for k in before)
    loaded = AutoModelForCausalLM.from_pretrained(choice["path"])
    assert AutoTokenizer.from_pretrained(choice["path"]).eos_token == "<|im_end|>"
    assert loaded.config.model_type == "qwen3"


def test_the_curriculum_flips_at_tau_and_a_resume_keeps_its_phase_and_steps(sft, tmp_path):
    data, model = sft
    ckpt = tmp_path / "ckpt"
    judge = StandinServer("standin").start()  # phase 2 calls the quality judge: a stand-in endpoint
    role = "++llm.roles.reward_judge"
    judged = (
        f"{role}.backend=endpoint",
        f"{role}.base_url={judge.base_url}",
        f"{role}.served_name=standin",
        f"{role}.structured=true",  # the stand-in answers a JSON schema with its smallest instance
    )
    tau = "train.reward.curriculum.tau=0.3"
    train(data, model, ckpt, tmp_path / "run1", "train.grpo.max_steps=2", tau, *judged)
    first = read_validations(ckpt)[0]
    assert first["format_ok"] >= 0.3 and first["lam"] == 0.0  # measured before the flip, under phase 1
    state = json.loads((ckpt / "curriculum_state.json").read_text())
    assert (state["phase"], state["flipped_at_step"]) == (2, 0)
    steps = rows(ckpt / TRAIN_LOG)
    assert [(r["step"], r["phase"], r["lam"]) for r in steps] == [(1, 2.0, 0.5), (2, 2.0, 0.5)]
    assert all(r["judge_error_rate"] == 0.0 and r["judge_calls"] > 0 for r in steps)
    assert judge.bodies  # the judge was asked
    # an interrupted run logged step 3 but died before its checkpoint: the resume redoes it
    with open(ckpt / TRAIN_LOG, "a") as f:
        f.write(json.dumps({"step": 3, "score": -1.0}) + "\n")
    train(data, model, ckpt, tmp_path / "run2", "train.grpo.max_steps=4", tau, *judged)
    steps = rows(ckpt / TRAIN_LOG)
    assert [r["step"] for r in steps] == [1, 2, 3, 4]  # continued at 3, nothing repeated
    assert [r["batch"] for r in steps] == [1, 1, 2, 2]  # two updates a batch, numbered on after the resume
    assert all(r["score"] >= 0.0 and r["phase"] == 2.0 for r in steps)
    assert json.loads((ckpt / "curriculum_state.json").read_text())["flipped_at_step"] == 0
    assert (ckpt / "checkpoint-4").is_dir()
    trainer_state = json.loads((ckpt / "checkpoint-4" / "trainer_state.json").read_text())
    assert trainer_state["global_step"] == 4
    judge.stop()


def test_a_rate_below_tau_keeps_phase_one(sft, tmp_path):
    data, model = sft
    ckpt = tmp_path / "ckpt"
    train(data, model, ckpt, tmp_path / "run", "train.grpo.max_steps=2", "train.reward.curriculum.tau=0.95")
    rates = [r["format_ok"] for r in read_validations(ckpt).values()]
    assert rates and max(rates) < 0.95
    state = json.loads((ckpt / "curriculum_state.json").read_text())
    assert (state["phase"], state["flipped_at_step"]) == (1, None)


def test_resume_takes_the_newest_complete_checkpoint(tmp_path):
    """A run killed while saving leaves a checkpoint without trainer_state.json (the HF Trainer writes it
    last): the resume takes the one before."""
    for step, complete in ((2, True), (4, True), (6, False)):
        (tmp_path / f"checkpoint-{step}").mkdir()
        if complete:
            (tmp_path / f"checkpoint-{step}" / "trainer_state.json").write_text("{}")
    (tmp_path / "checkpoint-x").mkdir()
    assert newest_checkpoint(tmp_path) == (tmp_path / "checkpoint-4", 4)
    assert newest_checkpoint(tmp_path / "none") == (None, 0)


# --- GRPO learns, and its updates do not depend on how they are cut up (in this process, tiny and seeded) ---


@pytest.fixture(scope="module")
def either_op(tmp_path_factory):
    """A tiny Qwen3 that answers KEEP or DROP about half the time each, on rows where every message is gold:
    only a valid KEEP earns a reward (1), so GRPO has one clear thing to learn."""
    out = tmp_path_factory.mktemp("either_op")
    return out, format_taught_qwen3(out, steps=80, both_ops=True)


def moved(a, b) -> float:
    return max(float((a[k].float() - b[k].float()).abs().max()) for k in a)


def test_grpo_raises_the_reward_of_sampled_replies(either_op, tmp_path):
    data, model = either_op
    before = sampled_reward(model, data / "train.parquet")
    ckpt = trl_train(data, model, tmp_path / "ckpt", max_steps=16, save_freq=8)
    after = sampled_reward(ckpt / "checkpoint-16", data / "train.parquet")
    gain = statistics.fmean(after) - statistics.fmean(before)
    se = (statistics.pvariance(before) / len(before) + statistics.pvariance(after) / len(after)) ** 0.5
    # measured 0.50 -> 0.84 (256 replies each); a gain of 4 standard errors does not happen by chance
    assert gain > max(0.15, 4 * se), (statistics.fmean(before), statistics.fmean(after), se)
    scores = [r["score"] for r in rows(ckpt / TRAIN_LOG)]
    assert statistics.fmean(scores[-4:]) > statistics.fmean(scores[:4])  # the training log agrees


def test_micro_batches_and_accumulation_give_the_same_update(either_op, tmp_path):
    """One prompt's 8 rollouts per optimiser step: in one pass of 8 or four of 2 (trl/config.py's mapping to
    gradient_accumulation_steps and steps_per_generation, and TRL's loss normaliser)."""
    data, model = either_op
    one = trl_train(data, model, tmp_path / "one", max_steps=2, save_freq=1) / "checkpoint-2"
    four = trl_train(data, model, tmp_path / "four", max_steps=2, save_freq=1, per_device_train_batch_size=2)
    change = moved(weights(one), weights(model))
    assert change > 1e-4  # the update is large enough to compare (measured 6e-4)
    assert moved(weights(one), weights(four / "checkpoint-2")) < 1e-3 * change  # measured 1.4e-7


def test_a_run_resumed_in_its_second_epoch_equals_an_uninterrupted_one(either_op, tmp_path):
    """8 prompts, 2 per batch, 2 updates per batch: 8 optimiser steps per epoch. A run killed after its
    checkpoint at step 8 resumes into epoch 2 with the same prompts, rollouts and updates (TRL's own sampler
    would replay epoch 1's order there: trl/test_trainer.py)."""
    data, model = either_op
    whole = trl_train(data, model, tmp_path / "whole", max_steps=10, save_freq=4)
    killed = tmp_path / "killed"
    shutil.copytree(whole / "checkpoint-8", killed / "checkpoint-8")  # what a kill after step 8 leaves
    trl_train(data, model, killed, max_steps=10, save_freq=4)
    step = moved(weights(whole / "checkpoint-10"), weights(whole / "checkpoint-8"))
    assert step > 1e-4 and moved(weights(whole / "checkpoint-10"), weights(killed / "checkpoint-10")) < 1e-6


def test_a_full_fine_tune_under_bf16_takes_a_1e_6_step_and_a_policy_that_cannot_move_stops(
    either_op, tmp_path
):
    data, model = either_op
    ckpt = trl_train(data, model, tmp_path / "bf16", max_steps=1, save_freq=1, lr=1e-6, bf16=True)
    before, after = weights(model), weights(ckpt / "checkpoint-1")
    key = "model.layers.0.mlp.up_proj.weight"
    # fp32 master weights: every weight takes the step (bf16 weights kept 0.9% of them: the rest rounded away)
    assert after[key].dtype == torch.float32 and (after[key] != before[key]).float().mean() > 0.9
    with pytest.raises(PolicyNotMoved, match="after 2 optimiser steps"):
        trl_train(data, model, tmp_path / "frozen", max_steps=3, lr=0.0, policy_check_step=2)
