"""The memory model's GRPO reward (paper Eq. 6-9) as a VERL custom reward function.

    R = 1[valid] * ((1 - lam) * R_act + lam * R_qual)
    R_act = eta * A_g + (1 - eta) * A_n        (one-category window: that category's accuracy)
    R_qual = mean over KEEP messages of Q = 1[f > 0] (f + u) / 4   (0 when nothing is kept)

Validity is the project's one format gate (``check_decisions`` with n = number of window messages).
``lam`` comes from the ``lam`` kwarg when given, else from the curriculum state file (kwarg
``curriculum_state`` or ``$LAZYMEM_CURRICULUM_STATE``), else 0 (phase 1). While lam = 0 the judge is
never called. For VERL use ``compute_score_async`` (awaited in the reward loop's event loop, so judge
calls of all rollouts overlap); ``compute_score`` is the same thing for synchronous callers.

The returned dict has the same keys on every call (VERL's reward loop takes the key list from the first
rollout's dict); values are float, int, str or None. VERL's validation metrics
(``process_validation_metrics``) drop None, skip string-valued keys, and name each prompt's mean
``mean@<number of remaining values>``. Hence the conventions:

- category absent: ``a_gold`` is None when the window has no gold message, ``a_nongold`` None when it
  has no non-gold one. That is a property of the prompt, so all its rollouts agree and the prompt simply
  drops out: ``a_gold/mean@N`` is gold retention over gold-bearing windows, undiluted by a sentinel.
- invalid output: it made no decisions, so it kept no gold and dropped no non-gold: ``a_gold`` /
  ``a_nongold`` / ``r_act`` are 0.0 (where the category exists), ``n_keep`` 0, ``r_qual`` 0.0 in phase 2.
  A None here would vary between a prompt's rollouts and split the metric into several ``mean@k``.
- ``r_qual`` is None while lam = 0 (not computed; the same for the whole round).
- ``gate_error`` is the gate's error code, a string, or None for a valid output: skipped by the
  metrics, kept in VERL's validation dumps; ``format_ok`` (1.0 / 0.0) carries the rate.
- ``judge_s`` is the seconds the rollout waited for its judge calls (concurrent, so its slowest call,
  queueing in the judge's server included), 0.0 without calls: a step's mean, beside the judge role's
  ``timeout_s``, measures how close phase 2's load brings the judge to timing out.
"""

# No `from __future__ import annotations` here: VERL may load this file by path without registering it in
# sys.modules, and dataclasses cannot resolve string annotations of such a module.
import asyncio
import math
import time
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from lazymem.construct.accuracy import ETA, action_reward, category_accuracy
from lazymem.construct.decisions import Decision, check_decisions
from lazymem.train.grpo.curriculum import read_state, state_path
from lazymem.train.grpo.quality_judge import JudgeConfig, JudgeItem, get_judge
from lazymem.train.grpo.rl_rows import WindowTruth, read_ground_truth

RESULT_KEYS = (
    "score",
    "format_ok",
    "gate_error",
    "r_act",
    "r_qual",
    "a_gold",
    "a_nongold",
    "n_keep",
    "lam",
    "phase",
    "judge_calls",
    "judge_errors",
    "judge_s",
)
_VERL_EXTRAS = frozenset({"reward_router_address", "reward_model_tokenizer"})  # passed by VERL, unused
_TRAINER_SETTINGS = frozenset({"tau", "lam_phase2"})  # read by the trainer side of the curriculum


@dataclass(frozen=True)
class RewardOptions:
    """The reward's settings, from VERL's ``reward_kwargs`` (conf/train/reward.yaml)."""

    eta: float = ETA
    lam: float | None = None  # fixed lambda; None = follow the curriculum state file
    curriculum_state: str | None = None  # state file path; None = $LAZYMEM_CURRICULUM_STATE
    judge: JudgeConfig = field(default_factory=JudgeConfig)
    lam_phase1: float = 0.0  # lambda before the curriculum's state file exists

    @classmethod
    def from_kwargs(cls, kwargs: Mapping[str, Any]) -> "RewardOptions":
        own = {"eta", "lam", "curriculum_state", "judge", "lam_phase1"}
        unknown = sorted(set(kwargs) - own - _VERL_EXTRAS - _TRAINER_SETTINGS)
        if unknown:
            raise TypeError(f"compute_score got unknown settings {unknown}")
        eta = float(kwargs.get("eta", ETA))
        lam = kwargs.get("lam")
        lam = None if lam is None else float(lam)
        lam1 = float(kwargs.get("lam_phase1", 0.0))
        if not all(0.0 <= x <= 1.0 for x in (eta, lam1, 0.0 if lam is None else lam)):
            raise ValueError(f"eta, lam and lam_phase1 must lie in [0, 1]; got {eta}, {lam}, {lam1}")
        state = kwargs.get("curriculum_state")
        judge = JudgeConfig.from_mapping(kwargs.get("judge"))
        return cls(eta, lam, str(state) if state else None, judge, lam1)

    def lam_phase(self) -> tuple[float, int]:
        """(lambda, phase) in force now."""
        if self.lam is not None:
            return self.lam, 2 if self.lam > 0 else 1
        path = state_path(self.curriculum_state)
        current = read_state(path) if path is not None else None
        if current is None:
            return self.lam_phase1, 1
        return float(current["lam"]), int(current["phase"])


async def quality_reward(
    truth: WindowTruth, decisions: Sequence[Decision], judge: Any
) -> tuple[float, int, int]:
    """(R_qual, judge calls, judge errors): one concurrent judge call per KEEP message (Eq. 9)."""
    items = [
        JudgeItem(truth.query, truth.query_time, truth.answer, truth.reasoning, truth.messages[i], d.content)
        for i, d in enumerate(decisions)
        if d.op == "KEEP"
    ]
    if not items:
        return 0.0, 0, 0
    scores = await asyncio.gather(*(judge.score(item) for item in items))
    errors = sum(1 for s in scores if s.error is not None)
    return math.fsum(s.q for s in scores) / len(scores), len(scores), errors


async def compute_score_async(
    data_source: str, solution_str: str, ground_truth: Any, extra_info: Mapping | None = None, **kwargs: Any
) -> dict[str, Any]:
    """VERL reward for one rollout (see the module docstring for the returned keys)."""
    opts = RewardOptions.from_kwargs(kwargs)
    truth = read_ground_truth(ground_truth)
    lam, phase = opts.lam_phase()
    out: dict[str, Any] = dict.fromkeys(RESULT_KEYS)
    out.update(score=0.0, format_ok=0.0, lam=lam, phase=phase, judge_calls=0, judge_errors=0, judge_s=0.0)
    gate = check_decisions(solution_str, len(truth))
    if not gate.ok:  # no decisions: nothing kept, nothing dropped (see the module docstring)
        a_gold, a_nongold = category_accuracy(truth.gold, [""] * len(truth))
        out.update(gate_error=gate.error, r_act=0.0, a_gold=a_gold, a_nongold=a_nongold, n_keep=0)
        out["r_qual"] = 0.0 if lam > 0 else None
        return out
    a_gold, a_nongold = category_accuracy(truth.gold, [d.op for d in gate.decisions])
    r_act = action_reward(a_gold, a_nongold, opts.eta)
    out.update(format_ok=1.0, r_act=r_act, a_gold=a_gold, a_nongold=a_nongold)
    out["n_keep"] = sum(1 for d in gate.decisions if d.op == "KEEP")
    score = r_act
    if lam > 0:
        start = time.monotonic()
        r_qual, calls, errors = await quality_reward(truth, gate.decisions, get_judge(opts.judge))
        waited = time.monotonic() - start if calls else 0.0
        out.update(r_qual=r_qual, judge_calls=calls, judge_errors=errors, judge_s=waited)
        score = (1.0 - lam) * r_act + lam * r_qual
    out["score"] = score
    return out


def compute_score(
    data_source: str, solution_str: str, ground_truth: Any, extra_info: Mapping | None = None, **kwargs: Any
) -> dict[str, Any]:
    """Synchronous form of :func:`compute_score_async` (works inside a running event loop too)."""
    coro = compute_score_async(data_source, solution_str, ground_truth, extra_info, **kwargs)
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(coro)
    with ThreadPoolExecutor(max_workers=1) as pool:  # this thread's loop is busy: use a fresh one
        return pool.submit(asyncio.run, coro).result()
