"""A training step's reward metrics and the quality judge's error-rate bound, which every engine applies.

The quality judge scores a failed call Q = 0, so a failing judge lowers phase 2's reward without a sign in
the loss. Its error rate (judge errors / judge calls, counted by the reward per rollout) is logged with the
reward's other components at every training step and in every validation round; a rate above
``judge.max_error_rate`` stops the run with :class:`JudgeErrorRateExceeded`: a validation round's
(:func:`check_judge`), and a training step's before the policy learns from it (:class:`StepJudge`).
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Mapping, Sequence
from typing import Any

JUDGE_CALLS, JUDGE_ERRORS = "judge_calls", "judge_errors"  # the reward's judge counts per rollout


class JudgeErrorRateExceeded(RuntimeError):
    """The quality judge's error rate passed ``judge.max_error_rate``: the run stops."""


def judge_error_rate(means: Mapping[str, float]) -> float | None:
    """Judge errors over judge calls from per-rollout means (validation's, or a step's); None when the
    judge was not called (phase 1). A ratio of means is the ratio of sums when every prompt has the same
    number of rollouts."""
    calls = means.get(JUDGE_CALLS) or 0.0
    return means.get(JUDGE_ERRORS, 0.0) / calls if calls > 0 else None


def step_metrics(infos: Sequence[Mapping[str, Any]]) -> dict[str, float]:
    """A training step's reward metrics from its rollouts' reward dicts: each numeric component's mean
    (``reward/<key>/mean``; None and strings skipped) and ``reward/judge_error_rate`` (absent in phase 1)."""
    values: dict[str, list[float]] = {}
    for info in infos:
        for key, v in info.items():
            if isinstance(v, numbers.Real):
                values.setdefault(key, []).append(float(v))
    means = {key: math.fsum(vs) / len(vs) for key, vs in sorted(values.items())}
    out = {f"reward/{key}/mean": v for key, v in means.items()}
    rate = judge_error_rate(means)
    if rate is not None:
        out["reward/judge_error_rate"] = rate
    return out


def components(infos: Sequence[Mapping[str, Any]]) -> dict[str, float]:
    """Each reward component's mean over rollouts under its plain name (``score``, ``format_ok``, ...,
    ``judge_error_rate`` when the judge was called): :func:`step_metrics` without its prefixes."""
    return {k.removeprefix("reward/").removesuffix("/mean"): v for k, v in step_metrics(infos).items()}


FIX = (
    "A failed call scores Q = 0, so phase 2's reward no longer measures the policy. Check the judge "
    "(llm.roles.reward_judge; 'quality judge error' lines in the trainer's log say why), then rerun with "
    "the same train.grpo.checkpoint_dir: training resumes from its last checkpoint"
)


def check_judge(rate: float | None, bound: float, step: int) -> None:
    """Stop when validation's judge error rate passes the bound."""
    if rate is not None and rate > bound:
        raise JudgeErrorRateExceeded(
            f"validation at step {step}: the quality judge failed on {rate:.1%} of its calls, above "
            f"judge.max_error_rate = {bound:.1%} (conf/train/reward.yaml). {FIX}"
        )


def judge_counts(infos: Sequence[Mapping[str, Any]]) -> tuple[float, float]:
    """Judge calls and judge errors summed over rollouts' reward dicts."""
    calls = math.fsum(float(i.get(JUDGE_CALLS) or 0) for i in infos)
    return calls, math.fsum(float(i.get(JUDGE_ERRORS) or 0) for i in infos)


class StepJudge:
    """The judge's bound on training steps: calls are summed until they reach ``min_calls`` (one step of
    paper mode holds far more), and their error rate past ``bound`` stops the run. A few calls are not
    judged alone: with 5 calls one timeout would read as 20%."""

    def __init__(self, bound: float, min_calls: int):
        self.bound, self.min_calls = bound, min_calls
        self.calls = self.errors = 0.0
        self.first: int | None = None  # the first step pooled since the last check

    def add(self, infos: Sequence[Mapping[str, Any]], step: int) -> None:
        """Count a step's rollouts; raise :class:`JudgeErrorRateExceeded` past the bound."""
        calls, errors = judge_counts(infos)
        if calls <= 0:
            return  # phase 1, or no valid output: no judge call
        self.first = step if self.first is None else self.first
        self.calls, self.errors = self.calls + calls, self.errors + errors
        if self.calls < self.min_calls:
            return
        rate, calls, first = self.errors / self.calls, self.calls, self.first
        self.calls = self.errors = 0.0
        self.first = None
        if rate > self.bound:
            steps = f"step {step}" if first == step else f"steps {first}-{step}"
            raise JudgeErrorRateExceeded(
                f"training {steps}: the quality judge failed on {rate:.1%} of its {calls:g} calls, above "
                f"judge.max_error_rate = {self.bound:.1%} (conf/train/reward.yaml), before the policy learnt "
                f"from step {step}'s rollouts. {FIX}"
            )
