"""The summary of a method's records (lazymem/eval/metrics.py): LJ and judged accuracy, construction
against gold, latency, model-free scores."""

import pytest

from lazymem.eval.metrics import summarize
from lazymem.eval.results import render_results

from helpers_runs import METRIC_RECORDS, metric_record


def test_lj_counts_every_question_and_judged_accuracy_stays_beside_it():
    s = summarize(METRIC_RECORDS)
    assert (s["questions"], s["ok"], s["errors"], s["judged"], s["judge_errors"]) == (6, 5, 1, 4, 1)
    # LJ as the paper reports it: the failed question f and the unlabelled reply d count as wrong
    assert s["accuracy"] == pytest.approx(3 / 6)
    assert s["accuracy_by_type"] == pytest.approx({"x": 1 / 3, "y": 2 / 3})
    assert s["accuracy_task_averaged"] == pytest.approx(0.5)
    assert s["accuracy_judged"] == pytest.approx(3 / 4)
    assert s["abstention_accuracy"] == 1.0
    assert s["error_messages"] == {"answer model call failed: 500": 1}
    assert s["memory_tokens"]["mean"] == pytest.approx(16.0)
    assert s["windows"] == 5 and s["gate_format_rate"] == pytest.approx(3 / 5)
    assert s["window_outcomes"] == {"gate_ok": 3, "salvaged": 1, "fallback": 1}
    assert s["latency_s"]["processing"]["max"] == 3.0 and s["latency_s"]["total"]["n"] == 5


def test_construction_and_evidence_against_gold():
    s = summarize(METRIC_RECORDS)
    # a: gold {1} decided & kept; 0,2,3 non-gold, 2 kept. b: gold {5,6} decided, 5 kept; 4,7 dropped.
    assert s["construction"] == {
        "gold_decided": 3,
        "gold_kept": pytest.approx(2 / 3),
        "nongold_decided": 5,
        "nongold_dropped": pytest.approx(4 / 5),
        "kept_words_in_source": pytest.approx(8 / 10),  # a: 3 of 4, b: 5 of 6; c: no field
    }
    # gold recall over questions with gold (a, b, c, d): 1, 0.5, 1, 1
    assert s["gold_recall_in_memory"] == pytest.approx(3.5 / 4)
    assert s["all_gold_in_memory"] == pytest.approx(3 / 4)


def test_latency_statistics_pool_every_timed_run():
    r = metric_record("a", "x", True)
    r["latency_runs"] = [{"answer": 1.0, "total": 1.0}, {"answer": 3.0, "total": 3.0}]
    s = summarize([r, metric_record("b", "x", True)])  # b has one run: answer 2.0
    assert s["latency_s"]["answer"]["n"] == 3 and s["latency_s"]["answer"]["mean"] == pytest.approx(2.0)


def test_model_free_scores_cover_every_question_and_render_beside_the_judge():
    records = [metric_record("a", "x", True), metric_record("b", "x", False), metric_record("c", "y", True)]
    records.append(metric_record("d", "y", None, status="error"))
    for r, f1 in zip(records, (1.0, 0.5, 0.25, 0.0), strict=True):  # the failed d: its empty answer's 0
        r["scores"] = {"f1": f1}
    s = summarize(records + [metric_record("e", "z", True)])  # e: no metric applies (no scores)
    assert s["f1"] == pytest.approx(1.75 / 4)
    assert s["f1_by_type"] == pytest.approx({"x": 0.75, "y": 0.125})
    judge = {
        "model": "deepseek-v4-pro",
        "style": "locomo",
        "prompts": "lazymem",
        "prompts_sha256": None,
        "prompt_version": "abc",
        "decision_rule": "first CORRECT",
        "temperature": 0.0,
        "max_tokens": 1024,
    }
    md = render_results({"dataset": "locomo", "judge": judge, "methods": {"m": s}})
    assert "judge: deepseek-v4-pro, locomo style, prompts lazymem version abc" in md
    assert "| method | x | y | overall |" in md and "| m | 0.75 | 0.12 | 0.44 |" in md
