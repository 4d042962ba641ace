"""Small numeric helpers shared by tasks and reports."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np


def mean(values) -> float | None:
    """Arithmetic mean of an iterable (bools count as 0/1); None for no values."""
    xs = list(values)
    return sum(xs) / len(xs) if xs else None


def percentile(values: Sequence[float], q: float) -> float | None:
    """numpy's linear-interpolation percentile as a float, q in [0, 100]; None for no values."""
    return float(np.percentile(values, q)) if len(values) else None


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


def bootstrap_ci(values: Sequence[float], resamples: int = 10000, seed: int = 0, level: float = 0.95) -> dict:
    """Mean of per-question values with a percentile bootstrap CI (questions resampled with replacement).

    For one accuracy pass 0/1 per question; for a paired difference pass the per-question differences
    (see `paired_bootstrap`). Seeded, so a table re-renders the same interval. None entries when empty.
    """
    xs = np.asarray([float(v) for v in values])
    if not len(xs):
        return {"n": 0, "mean": None, "low": None, "high": None}
    rng = np.random.default_rng(seed)
    means = xs[rng.integers(0, len(xs), size=(resamples, len(xs)))].mean(axis=1)
    tail = 100 * (1 - level) / 2
    low, high = np.percentile(means, [tail, 100 - tail])
    return {"n": len(xs), "mean": float(xs.mean()), "low": float(low), "high": float(high)}


def paired_bootstrap(
    base: dict, other: dict, resamples: int = 10000, seed: int = 0, level: float = 0.95
) -> dict:
    """Question-level paired bootstrap of mean(other - base) over the question ids both dicts hold.

    `base` and `other` map question id -> score (0/1 correctness, or a within-question average); a
    question missing from either, or None in either, is left out.
    """
    common = [q for q in base if q in other and base[q] is not None and other[q] is not None]
    return bootstrap_ci([float(other[q]) - float(base[q]) for q in common], resamples, seed, level)
