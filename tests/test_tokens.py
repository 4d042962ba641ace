import json
import math
import random

import pytest

from lazymem.numeric import describe, percentile
from lazymem.tokens import count_tokens


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


def test_qwen_token_counts():
    assert count_tokens("") == 0
    assert count_tokens("Hello world") == 2  # "Hello", " world" in Qwen's BPE
    long = "The quick brown fox jumps over the lazy dog. " * 10
    assert 90 <= count_tokens(long) <= 110
    assert count_tokens("你好，世界") >= 2
