"""Question-level bootstrap intervals (lazymem/numeric.py) behind every report table's CI columns."""

from lazymem.numeric import bootstrap_ci, paired_bootstrap


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
