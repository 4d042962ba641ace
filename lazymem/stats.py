"""Small numeric helpers shared by tasks and reports."""

from __future__ import annotations

import math
from collections.abc import Sequence


def mean(values) -> float | None:
    """Arithmetic mean of an iterable (bools count as 0/1); None for no values."""
    xs = list(values)
    return sum(xs) / len(xs) if xs else None


def percentile(values: Sequence[float], q: float) -> float | None:
    """Linear-interpolation percentile (numpy's default), q in [0, 100]; None for no values."""
    if not values:
        return None
    xs = sorted(values)
    pos = (len(xs) - 1) * q / 100
    lo, hi = math.floor(pos), math.ceil(pos)
    return xs[lo] + (xs[hi] - xs[lo]) * (pos - lo)


def describe(values: Sequence[float]) -> dict:
    """mean / median / p90 / p95 / max of a list (None entries when empty)."""
    if not values:
        return {"n": 0, "mean": None, "median": None, "p90": None, "p95": None, "max": None}
    return {
        "n": len(values),
        "mean": sum(values) / len(values),
        "median": percentile(values, 50),
        "p90": percentile(values, 90),
        "p95": percentile(values, 95),
        "max": max(values),
    }
