import json

import pytest

from lazymem.eval.coverage import aggregate, question_coverage

from helpers import run_cli


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


def test_coverage_task_on_synthetic(tmp_path):
    out = run_cli("task=coverage", "retrieval.n=5", "coverage.radii=[0,2]", f"hydra.run.dir={tmp_path}")
    assert out.returncode == 0, out.stderr[-2000:]
    report = json.loads((tmp_path / "coverage.json").read_text())
    assert report["excluded_without_gold"] == 2 and report["questions"] == 14
    r0, r2 = report["radii"]["0"], report["radii"]["2"]
    assert r0["questions"] == r2["questions"] == 12
    assert r2["all_at_n"] >= r0["all_at_n"] and r2["windows"]["messages_per_window"] > 1
    assert sum(h["questions"] for h in r0["by_history"].values()) == 12  # each question on its own history
    assert r0["history_spread"]["min"] <= r0["all_at_n"] <= r0["history_spread"]["max"]
    assert set(r0["by_type"]) == {
        "knowledge-update",
        "multi-session",
        "single-session-assistant",
        "single-session-preference",
        "single-session-user",
        "temporal-reasoning",
    }
    q = report["retrieval"]["query_s"]
    assert {"bm25", "dense", "fusion", "rerank", "total"} <= set(q) and q["total"]["p95"] >= q["total"]["p50"]
    assert report["retrieval"]["histories_indexed"] == 14
    assert "| 2 |" in (tmp_path / "coverage.md").read_text()


def test_coverage_on_real_locomo(locomo_file, tmp_path):
    out = run_cli(
        "+experiment=coverage_locomo",
        f"data.path={locomo_file}",
        "retrieval=bm25",
        f"hydra.run.dir={tmp_path}",
    )
    assert out.returncode == 0, out.stderr[-2000:]
    report = json.loads((tmp_path / "coverage.json").read_text())
    alls = [report["radii"][str(w)]["all_at_n"] for w in range(4)]
    assert alls == sorted(alls) and alls[3] > 0.8  # coverage grows with the radius
    assert report["retrieval"]["histories_indexed"] == 2  # two conversations, indexed once each
