"""The TRL engine's reward function and log callback (lazymem/train/grpo/trl/callbacks.py), without a
trainer."""

from __future__ import annotations

import asyncio
import json
from types import SimpleNamespace

import pytest

import lazymem.train.grpo.reward as reward_mod
from lazymem.train.grpo.checkpoints import VALIDATION_LOG, read_validations
from lazymem.train.grpo.curriculum import Curriculum
from lazymem.train.grpo.quality_judge import JudgeScore
from lazymem.train.grpo.reward_metrics import JudgeErrorRateExceeded
from lazymem.train.grpo.rl_rows import ground_truth_json
from lazymem.train.grpo.trl.callbacks import (
    TRAIN_LOG,
    GrpoLog,
    MemoryReward,
    PolicyMoved,
    PolicyNotMoved,
    batch_of,
    forget_unsaved,
)

VALID = json.dumps([{"op": "KEEP", "compressed_content": "m", "reason": "r"}])


def batch(n_valid: int, n_invalid: int) -> dict:
    truth = ground_truth_json(
        query="q", query_time=None, messages=[{"role": "user", "content": "m"}], gold=[True], answer="a"
    )
    texts = [VALID] * n_valid + ["nonsense"] * n_invalid
    n = len(texts)
    return {
        "prompts": [[{"role": "user", "content": "m"}]] * n,
        "completions": [[{"role": "assistant", "content": t}] for t in texts],
        "reward_model": [{"style": "rule", "ground_truth": truth}] * n,
        "data_source": ["lazymem"] * n,
    }


def test_reward_scores_each_completion_and_keeps_train_and_validation_apart(tmp_path):
    reward = MemoryReward({"lam": 0.0})
    logged = {}
    scores = asyncio.run(reward(**batch(1, 1), log_metric=logged.__setitem__))
    assert scores == [1.0, 0.0] and logged["reward/format_ok/mean"] == 0.5
    reward.training = lambda: False
    asyncio.run(reward(**batch(0, 2)))
    assert len(reward.train_infos) == 2 and [i["format_ok"] for i in reward.eval_infos] == [0.0, 0.0]


def test_validation_rounds_move_the_curriculum_and_a_failing_judge_stops(tmp_path):
    reward = MemoryReward({"lam": 0.0})
    cur = Curriculum(tmp_path / "state.json", tau=0.5)
    log = GrpoLog(reward, tmp_path, 0.05, cur)
    reward.training = lambda: False
    asyncio.run(reward(**batch(1, 3)))
    log.on_evaluate(None, SimpleNamespace(global_step=0), None)
    assert cur.phase == 1 and read_validations(tmp_path)[0]["reward"] == 0.25
    asyncio.run(reward(**batch(2, 2)))
    log.on_evaluate(None, SimpleNamespace(global_step=4), None)
    assert (cur.phase, cur.flipped_at_step) == (2, 4)
    assert read_validations(tmp_path)[4]["lam"] == 0.0  # scored before the flip
    reward.eval_infos = [{"score": 0.0, "format_ok": 1.0, "lam": 0.5, "judge_calls": 4, "judge_errors": 1}]
    with pytest.raises(JudgeErrorRateExceeded, match="25.0% of its calls"):
        log.on_evaluate(None, SimpleNamespace(global_step=8), None)


class FailingJudge:
    """Grades every kept message (2, 2), except one whose text starts with "fail": a failed call."""

    async def score(self, item) -> JudgeScore:
        failed = item.memory.startswith("fail")
        return JudgeScore(None, None, error="request failed: stub") if failed else JudgeScore(2, 2)


def kept(*contents: str) -> dict:
    """A batch of completions that each keep their one message with this text: one judge call each."""
    out = batch(len(contents), 0)
    out["completions"] = [
        [{"role": "assistant", "content": VALID.replace('"m"', json.dumps(c))}] for c in contents
    ]
    return out


def test_a_training_batch_past_the_judge_bound_stops_before_the_optimiser_steps(monkeypatch, tmp_path):
    """Through the reward and the callback's on_pre_optimizer_step: a batch's judge error rate past
    judge.max_error_rate stops the run before the optimiser steps on it; a batch is counted once though it
    feeds two updates; batches with fewer than min_step_calls calls are summed; validation's do not count."""
    monkeypatch.setattr(reward_mod, "get_judge", lambda cfg: FailingJudge())
    reward = MemoryReward({"lam": 0.5})
    log = GrpoLog(reward, tmp_path, 0.2, None, min_step_calls=4)
    asyncio.run(reward(**kept("a", "fail b")))  # 1 of 2: too few calls to judge alone
    log.on_pre_optimizer_step(None, SimpleNamespace(global_step=0), None)
    log.on_pre_optimizer_step(None, SimpleNamespace(global_step=1), None)  # its second update
    reward.training = lambda: False
    asyncio.run(reward(**kept("fail c", "fail d", "fail e")))  # a validation batch
    reward.training = lambda: True
    log.on_pre_optimizer_step(None, SimpleNamespace(global_step=2), None)
    asyncio.run(reward(**kept("f", "g")))
    with pytest.raises(JudgeErrorRateExceeded, match=r"training steps 1-3: .* 25\.0% of its 4 calls"):
        log.on_pre_optimizer_step(None, SimpleNamespace(global_step=2), None)


def test_a_resume_forgets_the_steps_after_its_checkpoint(tmp_path):
    (tmp_path / TRAIN_LOG).write_text("".join(json.dumps({"step": s}) + "\n" for s in (1, 2, 3)))
    (tmp_path / VALIDATION_LOG).write_text(
        "".join(json.dumps({"step": s, "lam": 0}) + "\n" for s in (0, 2, 3))
    )
    assert forget_unsaved(tmp_path, 2) == 2
    assert [json.loads(x)["step"] for x in (tmp_path / TRAIN_LOG).read_text().splitlines()] == [1, 2]
    assert sorted(read_validations(tmp_path)) == [0, 2]


def test_the_policy_check_raises_only_when_no_sampled_weight_moved():
    torch = pytest.importorskip("torch")
    model = torch.nn.Linear(64, 64)
    model.bias.requires_grad_(False)  # frozen tensors are not sampled
    check = PolicyMoved(step=2, per_tensor=16)
    check.on_train_begin(None, SimpleNamespace(global_step=0), None, model=model)
    assert set(check.initial) == {"weight"} and check.initial["weight"].numel() == 16
    check.on_step_end(None, SimpleNamespace(global_step=1), None, model=model)  # not yet step 2
    with pytest.raises(PolicyNotMoved, match="after 2 optimiser steps none of 16 sampled"):
        check.on_step_end(None, SimpleNamespace(global_step=2), None, model=model)
    check.on_train_begin(None, SimpleNamespace(global_step=0), None, model=model)
    with torch.no_grad():
        model.weight[0, 0] += 1e-3  # one sampled element (the stride starts at 0) is enough
    check.on_step_end(None, SimpleNamespace(global_step=2), None, model=model)
    resumed = PolicyMoved(step=2)  # a run resumed at or past the step does not check
    resumed.on_train_begin(None, SimpleNamespace(global_step=2), None, model=model)
    assert resumed.initial is None
    off = PolicyMoved(step=0)
    off.on_train_begin(None, SimpleNamespace(global_step=0), None, model=model)
    assert off.initial is None


def test_each_logged_step_names_the_batch_it_trained_on(tmp_path):
    """A batch of 4 micro-batches trained on in updates of 2 is logged at two optimiser steps, both with its
    number (trl 1.16: one generation every steps_per_generation x num_iterations micro-batches)."""
    reward = MemoryReward({"lam": 0.0})
    log = GrpoLog(reward, tmp_path, 0.5, None)
    args = SimpleNamespace(steps_per_generation=4, num_iterations=1, gradient_accumulation_steps=2)
    for step, valid in ((1, 1), (2, 1), (3, 2), (4, 2), (5, 0)):
        if step % 2:
            asyncio.run(reward(**batch(valid, 2 - valid)))
        log.on_step_end(args, SimpleNamespace(global_step=step, is_world_process_zero=True), None)
    rows = [json.loads(line) for line in (tmp_path / TRAIN_LOG).read_text().splitlines()]
    assert [(r["step"], r["batch"], r["score"]) for r in rows] == [
        (1, 1, 0.5),
        (2, 1, 0.5),
        (3, 2, 1.0),
        (4, 2, 1.0),
        (5, 3, 0.0),
    ]
    twice = SimpleNamespace(steps_per_generation=2, num_iterations=2, gradient_accumulation_steps=1)
    assert [batch_of(s, twice) for s in (1, 4, 5)] == [1, 1, 2]  # num_iterations re-trains a batch
