"""The retrieval-default protocol: minimax-regret choice and its leave-one-unit-out estimate."""

from __future__ import annotations

import sys

import pytest

from helpers import ROOT

sys.path.insert(0, str(ROOT / "scripts"))  # the protocol lives beside its script, scripts/loo_retrieval.py
from loo_select import choose, leave_one_out, regrets, spread  # noqa: E402

# "peaky" is best on average thanks to one unit, but far behind on another; "steady" is never far behind
SCORES = {
    "peaky": {"a": 0.95, "b": 0.90, "c": 0.50},
    "steady": {"a": 0.80, "b": 0.80, "c": 0.70},
    "weak": {"a": 0.60, "b": 0.60, "c": 0.60},
}


def test_regrets_are_shortfalls_from_the_best_per_unit():
    r = regrets(SCORES, ["a", "b", "c"])
    assert r["peaky"] == pytest.approx([0.0, 0.0, 0.2])
    assert r["steady"] == pytest.approx([0.15, 0.1, 0.0])


def test_minimax_prefers_never_much_worse_over_best_mean():
    assert choose(SCORES, rule="best_mean") == "peaky"
    assert choose(SCORES) == "steady"


def test_ties_in_worst_regret_go_to_the_higher_mean():
    scores = {"x": {"a": 0.5, "b": 0.7}, "y": {"a": 0.7, "b": 0.6}, "z": {"a": 0.6, "b": 0.8}}
    # worst regrets: x 0.2, y 0.2, z 0.1 -> z; without z, x and y tie at 0.2 and y's mean is higher
    assert choose(scores) == "z"
    assert choose({k: scores[k] for k in "xy"}) == "y"


def test_leave_one_out_scores_each_pick_on_the_unit_it_never_saw():
    loo = leave_one_out(SCORES)
    # without c, peaky is never behind, so it is picked and pays its 0.2 shortfall on c
    assert loo["c"] == {"setting": "peaky", "score": 0.50, "regret": pytest.approx(0.2)}
    assert loo["a"]["setting"] == "steady" and loo["a"]["regret"] == pytest.approx(0.15)
    assert leave_one_out(SCORES, "best_mean")["b"]["setting"] == "steady"  # (0.95+0.5)/2 < 0.75


def test_bad_input_is_refused():
    with pytest.raises(ValueError, match="same"):
        choose({"x": {"a": 1.0}, "y": {"b": 1.0}})
    with pytest.raises(ValueError, match="no settings"):
        choose({})
    with pytest.raises(ValueError, match="rule"):
        choose(SCORES, rule="luck")
    with pytest.raises(ValueError, match="two units"):
        leave_one_out({"x": {"a": 1.0}})


def test_spread():
    assert spread([0.5, 0.7]) == pytest.approx({"mean": 0.6, "std": 0.1, "min": 0.5, "max": 0.7})
