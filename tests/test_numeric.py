"""Question-level bootstrap intervals (lazymem/numeric.py) behind every report table's CI columns."""

import json
import math
import random

import pytest

from lazymem.numeric import bootstrap_ci, describe, paired_bootstrap, percentile


def test_interval_brackets_the_mean_and_is_reproducible():
    values = [1] * 70 + [0] * 30
    ci = bootstrap_ci(values, seed=3)
    assert ci["n"] == 100 and ci["mean"] == 0.7
    assert ci["low"] < 0.7 < ci["high"]
    assert bootstrap_ci(values, seed=3) == ci


def test_interval_narrows_with_more_questions():
    small, large = bootstrap_ci([1, 0] * 10), bootstrap_ci([1, 0] * 500)
    assert large["high"] - large["low"] < small["high"] - small["low"]


def test_no_values_gives_no_interval():
    assert bootstrap_ci([]) == {"n": 0, "mean": None, "low": None, "high": None}


def test_paired_difference_of_identical_runs_is_exactly_zero():
    scores = {f"q{i}": i % 3 == 0 for i in range(40)}
    d = paired_bootstrap(scores, dict(scores))
    assert (d["mean"], d["low"], d["high"]) == (0.0, 0.0, 0.0)


def test_paired_difference_is_other_minus_base_over_shared_questions():
    base = {f"q{i}": 1 for i in range(40)}
    other = {f"q{i}": int(i < 10) for i in range(40)} | {"extra": 1}
    base["gone"] = 1  # only in base: left out, as is a None score
    other["q0"] = None
    d = paired_bootstrap(base, other)
    assert d["n"] == 39
    assert abs(d["mean"] - (9 / 39 - 1)) < 1e-12
    assert d["high"] < 0  # a large drop is clearly outside noise


def test_pairing_removes_the_between_question_spread():
    """Two runs that differ on one question: the paired interval is far tighter than either accuracy's."""
    base = {f"q{i}": i % 2 for i in range(60)}
    other = dict(base, q0=1)
    d = paired_bootstrap(base, other)
    single = bootstrap_ci(list(base.values()))
    assert d["high"] - d["low"] < (single["high"] - single["low"]) / 2


def test_percentiles_interpolate_like_numpy():
    xs = [4.0, 1.0, 3.0, 2.0]
    assert percentile(xs, 50) == 2.5
    assert percentile(xs, 0) == 1.0 and percentile(xs, 100) == 4.0
    assert percentile(list(range(1, 101)), 95) == pytest.approx(95.05)
    assert percentile([], 50) is None
    d = describe([1.0, 2.0, 3.0, 10.0])
    assert d == {
        "n": 4,
        "mean": 4.0,
        "median": 2.5,
        "p90": pytest.approx(7.9),
        "p95": pytest.approx(8.95),
        "max": 10.0,
    }
    assert describe([])["mean"] is None


def hand_written_percentile(values, q):
    """The interpolation lazymem computed by hand before it used numpy's."""
    xs = sorted(values)
    pos = (len(xs) - 1) * q / 100
    lo, hi = math.floor(pos), math.ceil(pos)
    return xs[lo] + (xs[hi] - xs[lo]) * (pos - lo)


def test_numpy_percentiles_match_the_hand_written_ones():
    rng = random.Random(0)
    for _ in range(200):
        xs = [rng.uniform(0, 100) for _ in range(rng.randint(1, 30))]
        for q in (0, 50, 90, 95, 100):
            assert percentile(xs, q) == pytest.approx(hand_written_percentile(xs, q), abs=1e-9)
    assert type(percentile([1, 2], 50)) is float  # a plain float: summaries stay JSON
    json.dumps(describe([1, 2, 3]))
