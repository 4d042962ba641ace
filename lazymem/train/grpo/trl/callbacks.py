"""The TRL engine's reward function and its callback: reward components, validation log, curriculum.

:class:`MemoryReward` is GRPOTrainer's reward function: ``lazymem.train.grpo.reward.compute_score_async`` for
every completion (async, so phase 2's judge calls of a batch overlap), on build_rl's rows (``reward_model``
and ``extra_info`` reach it as TRL passes every dataset column, trl/trainer/grpo_trainer.py:1579-1590). It
keeps the latest training batch's reward dicts and the validation round's, and hands each component's mean
to TRL's ``log_metric`` (so W&B gets ``reward/<key>/mean``, ``eval_reward/...`` for validation).

:class:`GrpoLog` writes what every engine's trainer writes, with the shared functions: one line per
optimiser step in ``train_metrics.jsonl`` (the components of the batch that step trained on, and that
batch's number: a batch is trained on in several optimiser steps, each logging the same values), every
validation round in ``validation_metrics.jsonl`` (checkpoints.append_validation) with the lambda
it was scored under, the curriculum moved by its format-valid rate, and the run stopped when the judge's
error rate passes ``judge.max_error_rate``: a validation round's (check_judge) or a training batch's, before
the optimiser steps on it (StepJudge).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from transformers import TrainerCallback

from lazymem.train.grpo.checkpoints import TRAIN_LOG, VALIDATION_LOG, append_training, append_validation
from lazymem.train.grpo.curriculum import Curriculum
from lazymem.train.grpo.diagnostics import load_jsonl
from lazymem.train.grpo.quality_judge import JudgeConfig
from lazymem.train.grpo.reward import compute_score_async
from lazymem.train.grpo.reward_metrics import StepJudge, check_judge, components, step_metrics


def completion_text(completion: Any) -> str:
    """A completion's text: the assistant message of a conversational completion, or the string itself."""
    if isinstance(completion, str):
        return completion
    return str(completion[-1].get("content") or "")


class MemoryReward:
    """GRPOTrainer's reward function (see the module docstring)."""

    __name__ = "lazymem"  # TRL names the reward's metrics after it (rewards/lazymem/mean)

    def __init__(self, settings: Mapping[str, Any]):
        self.settings = dict(settings)  # reward kwargs: eta, curriculum_state, lam_phase1/2, tau, judge
        self.training: Callable[[], bool] = lambda: True  # set to the trainer's model.training
        self.train_infos: list[dict[str, Any]] = []  # the latest training batch's reward dicts
        self.train_batches = 0  # training batches scored so far
        self.eval_infos: list[dict[str, Any]] = []  # this validation round's, so far

    async def __call__(self, prompts, completions, reward_model, data_source, extra_info=None, **kw):
        extra = extra_info or [None] * len(completions)
        infos = await asyncio.gather(
            *(
                compute_score_async(src, completion_text(c), rm["ground_truth"], info, **self.settings)
                for src, c, rm, info in zip(data_source, completions, reward_model, extra, strict=True)
            )
        )
        if self.training():
            self.train_infos = list(infos)
            self.train_batches += 1
        else:
            self.eval_infos.extend(infos)
        log_metric = kw.get("log_metric")
        if log_metric is not None:
            for key, value in step_metrics(infos).items():
                log_metric(key, value)
        return [float(info["score"]) for info in infos]


def batch_of(step: int, args: Any) -> int:
    """The generation batch (from 1) that optimiser step ``step`` (from 1) trained on. trl 1.16 samples a
    batch every ``steps_per_generation`` x ``num_iterations`` micro-batches (grpo_trainer.py:1537-1546) and
    steps the optimiser every ``gradient_accumulation_steps`` of them; checkpoints fall on batch ends
    (config.grpo_args' save_steps), so a resumed run numbers its batches on."""
    micro = int(args.steps_per_generation) * int(args.num_iterations)
    updates = max(1, micro // int(args.gradient_accumulation_steps))
    return (int(step) - 1) // updates + 1


def drop_after(path: Path, step: int) -> int:
    """Keep the JSON lines of ``path`` whose ``step`` is at most ``step``; returns how many were dropped."""
    if not path.exists():
        return 0
    rows = load_jsonl(path)
    kept = [r for r in rows if int(r["step"]) <= step]
    path.write_text("".join(json.dumps(r) + "\n" for r in kept), encoding="utf-8")
    return len(rows) - len(kept)


def forget_unsaved(directory: Path, step: int) -> int:
    """Before a run resumes from checkpoint ``step`` (0: from the start), drop the steps after it from the
    training and validation logs: the resumed run does them again, and each step keeps one line."""
    return drop_after(directory / TRAIN_LOG, step) + drop_after(directory / VALIDATION_LOG, step)


class GrpoLog(TrainerCallback):
    """Step metrics, validation rounds, the curriculum and the judge's bound (see the module docstring)."""

    def __init__(
        self,
        reward: MemoryReward,
        directory: Path,
        max_error_rate: float,
        curriculum: Curriculum | None,
        min_step_calls: int = JudgeConfig.min_step_calls,
    ):
        self.reward, self.directory = reward, Path(directory)
        self.max_error_rate, self.curriculum = max_error_rate, curriculum
        self.step_judge, self.judged = StepJudge(max_error_rate, min_step_calls), 0

    def on_pre_optimizer_step(self, args, state, control, **kwargs):
        """Judge a new batch's judge errors before the optimiser steps on it. trl 1.16 scores a batch in
        the first training_step of its first update (grpo_trainer.py:1537-1546, 2753) and transformers 5.10
        calls this before ``optimizer.step()``, and on_step_end and the checkpoint save after it
        (trainer.py:1768-1793), so a stop here leaves neither an update nor a checkpoint of the batch. Its
        second update reuses the batch: checked once."""
        if self.reward.train_batches != self.judged:
            self.judged = self.reward.train_batches
            self.step_judge.add(self.reward.train_infos, state.global_step + 1)

    def on_step_end(self, args, state, control, **kwargs):
        if state.is_world_process_zero and self.reward.train_infos:
            step = state.global_step
            append_training(self.directory, step, batch_of(step, args), self.reward.train_infos)

    def on_evaluate(self, args, state, control, metrics=None, **kwargs):
        infos, self.reward.eval_infos = self.reward.eval_infos, []
        if not infos:
            return
        means = components(infos)
        step = state.global_step
        # `reward` is the score, as VERL names it (train.grpo.select_metric); the lambda and phase are the
        # ones the rollouts were scored under, before this round moves the curriculum
        record = {"step": step, **means, "reward": means["score"]}
        append_validation(self.directory, record)
        if self.curriculum is not None:
            self.curriculum.observe_validation(means["format_ok"], step=step)
        check_judge(means.get("judge_error_rate"), self.max_error_rate, step)


class PolicyNotMoved(RuntimeError):
    """The policy's trainable weights after some optimiser steps still equal the initial ones."""


class PolicyMoved(TrainerCallback):
    """Stops training loudly when the policy has not moved after ``step`` optimiser steps.

    A run whose updates all round away (bf16 weights under a 1e-6 step), whose learning rate is 0 or whose
    gradients never reach the weights looks healthy in every log but learns nothing. At the start this keeps a
    strided sample of up to ``per_tensor`` elements of every trainable tensor (a few MB for a 4B model); at
    optimiser step ``step`` it raises :class:`PolicyNotMoved` if no sampled element changed. Only a run that
    starts before ``step`` checks (a run resumed past it has a checkpoint that moved or was checked).
    """

    def __init__(self, step: int, per_tensor: int = 256):
        self.step, self.per_tensor = int(step), int(per_tensor)
        self.initial: dict[str, Any] | None = None

    def sample(self, model) -> dict[str, Any]:
        out = {}
        for name, p in model.named_parameters():
            if p.requires_grad:
                flat = p.detach().reshape(-1)
                out[name] = flat[:: max(1, flat.numel() // self.per_tensor)].float().cpu().clone()
        return out

    def on_train_begin(self, args, state, control, model=None, **kwargs):
        if self.step > 0 and state.global_step < self.step and model is not None:
            self.initial = self.sample(model)

    def on_step_end(self, args, state, control, model=None, **kwargs):
        if self.initial is None or state.global_step != self.step:
            return
        now, before = self.sample(model), self.initial
        self.initial = None
        changed = sum(int((now[k] != v).sum()) for k, v in before.items())
        if not changed:
            total = sum(v.numel() for v in before.values())
            raise PolicyNotMoved(
                f"after {self.step} optimiser steps none of {total} sampled trainable weights changed: the "
                "policy is not learning (learning rate 0, updates rounding away in bf16 weights, no gradient "
                "reaching them, or equal rewards within every group so far); train.grpo.policy_check_step=0 "
                "switches this check off"
            )
