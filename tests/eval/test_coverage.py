"""Retrieval coverage (lazymem/eval/coverage.py): one question by hand, and the aggregate per type, history
and window."""

import pytest

from lazymem.eval.coverage import aggregate, question_coverage


def test_question_coverage_by_hand():
    # 20 messages, retrieved 5 and 9, gold 3 and 10
    c0 = question_coverage([5, 9], [3, 10], 20, radius=0)
    assert (c0["all"], c0["any"], c0["windows"], c0["window_messages"]) == (False, False, 2, 2)
    c1 = question_coverage([5, 9], [3, 10], 20, radius=1)
    assert (c1["all"], c1["any"]) == (False, True)  # 10 is a neighbour of 9, 3 is not reached
    c2 = question_coverage([5, 9], [3, 10], 20, radius=2)
    # merged into 3..11 (9 messages), split at L = 8 / s = 7 into 3..10 and 10..11: gold 10 is in both
    assert c2["all"] and c2["windows"] == 2 and c2["window_messages"] == 10
    assert c2["windows_with_gold"] == 2 and c2["window_gold_messages"] == 3
    unsplit = question_coverage([5, 9], [3, 10], 20, radius=2, max_len=9)
    assert unsplit["windows"] == 1 and unsplit["window_messages"] == 9


def test_aggregate_overall_per_type_per_history_and_windows():
    rows = [
        {"type": "a", "history": "h1", "coverage": question_coverage([5], [5], 10, 1)},
        {"type": "a", "history": "h1", "coverage": question_coverage([5], [8], 10, 1)},
        {"type": "b", "history": "h2", "coverage": question_coverage([0, 9], [0, 9], 10, 1)},
    ]
    agg = aggregate(rows)
    assert agg["all_at_n"] == pytest.approx(2 / 3) and agg["any_at_n"] == pytest.approx(2 / 3)
    assert agg["by_type"]["a"] == {"questions": 2, "all_at_n": 0.5, "any_at_n": 0.5}
    assert agg["windows"]["per_question"] == pytest.approx(4 / 3)
    assert agg["windows"]["with_gold"] == pytest.approx(3 / 4)
    assert agg["windows"]["messages_per_window"] == pytest.approx(10 / 4)
    assert agg["by_history"] == {
        "h1": {"questions": 2, "all_at_n": 0.5},
        "h2": {"questions": 1, "all_at_n": 1.0},
    }
    spread = agg[
        "history_spread"
    ]  # over histories, not questions: h2's one question weighs as much as h1's two
    assert spread["histories"] == 2 and spread["mean"] == pytest.approx(0.75) and spread["min"] == 0.5
    assert spread["std"] == pytest.approx(0.25) and spread["max"] == 1.0
    assert aggregate([])["all_at_n"] is None
