"""Choosing a retrieval setting that generalizes: minimax regret, checked by leave-one-unit-out.

A unit is one conversation (LoCoMo) or one sample of questions (LongMemEval-S); `scores[setting][unit]`
is the setting's coverage there. A setting's regret on a unit is how far it falls below the best
setting on that unit. `choose` takes the setting whose worst regret over the units is smallest (the one
never much worse), breaking ties by the higher mean. `leave_one_out` re-runs that choice without each
unit in turn and scores the pick on the unit it never saw: the estimate of how the rule does on a
conversation nobody tuned on.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from statistics import fmean, pstdev

Scores = Mapping[str, Mapping[str, float]]
RULES = ("minimax_regret", "best_mean")


def _units(scores: Scores) -> list[str]:
    if not scores:
        raise ValueError("no settings to choose from")
    units = [list(per_unit) for per_unit in scores.values()]
    if any(set(u) != set(units[0]) for u in units) or not units[0]:
        raise ValueError("every setting needs a score on the same, non-empty set of units")
    return units[0]


def regrets(scores: Scores, units: Sequence[str]) -> dict[str, list[float]]:
    """Per setting, its shortfall from the best setting on each unit (0 where it is the best)."""
    best = {u: max(per_unit[u] for per_unit in scores.values()) for u in units}
    return {name: [best[u] - per_unit[u] for u in units] for name, per_unit in scores.items()}


def choose(scores: Scores, units: Sequence[str] | None = None, rule: str = "minimax_regret") -> str:
    """The setting the rule picks using only `units` (all by default); ties go to the first listed."""
    if rule not in RULES:
        raise ValueError(f"rule must be one of {RULES}, not {rule!r}")
    units = list(units) if units is not None else _units(scores)
    means = {name: fmean(per_unit[u] for u in units) for name, per_unit in scores.items()}
    if rule == "best_mean":
        return max(scores, key=lambda name: means[name])
    worst = {name: max(r) for name, r in regrets(scores, units).items()}
    return min(scores, key=lambda name: (round(worst[name], 9), -means[name]))


def leave_one_out(scores: Scores, rule: str = "minimax_regret") -> dict[str, dict]:
    """Per held-out unit: the setting chosen without it, its score and regret on that unit."""
    units = _units(scores)
    if len(units) < 2:
        raise ValueError("leave-one-out needs at least two units")
    out = {}
    for held in units:
        pick = choose(scores, [u for u in units if u != held], rule)
        best = max(per_unit[held] for per_unit in scores.values())
        out[held] = {"setting": pick, "score": scores[pick][held], "regret": best - scores[pick][held]}
    return out


def spread(values: Sequence[float]) -> dict[str, float]:
    """Mean, population standard deviation and range of per-unit numbers."""
    return {"mean": fmean(values), "std": pstdev(values), "min": min(values), "max": max(values)}
