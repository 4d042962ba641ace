"""Write-time cost accounting (lazymem/report/costs.py) and the paper systems we do not run."""

from __future__ import annotations

import json

import pytest

from lazymem.report.costs import SYSTEMS, cost_plot, not_run, not_run_note, write_cost
from lazymem.report.tables import build_tables, load_references, table_write_cost


def record(qid, total, store=None, status="ok", seconds=100.0, calls=10):
    detail = {}
    if store is not None:
        detail["ingest"] = {
            "store": store,
            "built_now": False,
            "build_seconds": seconds,
            "llm_calls": calls,
            "llm_prompt_tokens": 1000 * calls,
            "llm_completion_tokens": 50 * calls,
        }
    return {"qid": qid, "status": status, "latency_s": {"total": total}, "detail": detail}


def test_offline_cost_counts_each_store_once_and_is_amortised_over_questions():
    records = [
        record("q1", 2.0, "h1-abc", seconds=120.0, calls=12),
        record("q2", 4.0, "h1-abc", seconds=120.0, calls=12),
        record("q3", 3.0, "h2-def", seconds=60.0, calls=6),
        record("q4", 9.0, "h2-def", status="error"),  # a failed question is not an answered one
    ]
    c = write_cost(records)
    assert c["questions"] == 3 and c["histories"] == 2
    assert c["offline_total"]["build_seconds"] == 180.0 and c["offline_total"]["llm_calls"] == 18
    assert c["offline_per_history"]["build_seconds"] == 90.0
    assert c["offline_per_history"]["llm_prompt_tokens"] == 9000.0
    assert c["online_s_per_question"] == pytest.approx(3.0)
    assert c["amortised_offline_s_per_question"] == pytest.approx(60.0)
    assert c["total_s_per_question"] == pytest.approx(63.0)


def test_query_time_methods_have_zero_offline_cost():
    c = write_cost([record("q1", 1.0), record("q2", 3.0)])
    assert c["histories"] == 0 and c["offline_per_history"]["llm_calls"] == 0.0
    assert c["amortised_offline_s_per_question"] == 0.0 and c["total_s_per_question"] == pytest.approx(2.0)


def test_no_answered_question_gives_no_cost():
    c = write_cost([record("q1", 1.0, status="error")])
    assert c["questions"] == 0 and c["online_s_per_question"] is None and c["total_s_per_question"] is None


def test_an_ingest_entry_without_a_store_id_is_refused():
    bad = record("q7", 1.0, "h1")
    del bad["detail"]["ingest"]["store"]
    with pytest.raises(ValueError, match=r"record 'q7': detail.ingest has no 'store' id"):
        write_cost([bad])


def rows():
    mem0 = write_cost([record("q1", 2.0, "h1-abc"), record("q2", 2.0, "h1-abc")])
    rag = write_cost([record("q1", 1.0), record("q2", 1.0)])
    return [
        {"run": "r", "benchmark": "locomo", "method": "mem0", "accuracy": 0.5, "write_cost": mem0},
        {"run": "r", "benchmark": "locomo", "method": "rag_top50", "accuracy": 0.25, "write_cost": rag},
        {"run": "r", "benchmark": "locomo", "method": "old_run", "accuracy": 0.1},  # no cost: not plotted
    ]


def test_cost_table_has_one_line_per_method():
    text = table_write_cost([r for r in rows() if "write_cost" in r]).markdown()
    lines = [line for line in text.splitlines() if line.startswith("| locomo")]
    assert lines == [
        "| locomo | mem0 | 1 | 100.0 | 10.0 | 10500 | 2.00 | 50.00 | 52.00 | 0.50 |",
        "| locomo | rag_top50 | 0 | 0.0 | 0.0 | 0 | 1.00 | 0.00 | 1.00 | 0.25 |",
    ]


def test_cost_plot_writes_one_png_per_benchmark(tmp_path):
    paths = cost_plot(rows(), tmp_path)
    assert [p.name for p in paths] == ["accuracy_vs_total_cost_locomo.png"]
    assert paths[0].read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_paper_systems_not_run_carry_a_reason_and_mem0_is_run():
    reasons = not_run()
    assert sorted(reasons) == ["lightmem", "memorybank", "memskill", "memt", "structmem"]
    assert reasons["lightmem"].startswith("the only release (lightmem 0.0.0) is an unfinished skeleton")
    note = not_run_note()
    assert (
        note.startswith("Paper-reported, not run here: lightmem (the only release")
        and "memt (no install" in note
    )

    systems = json.loads(SYSTEMS.read_text())["systems"]
    assert systems["mem0"]["run"] and systems["mem0"]["method"] == "mem0"


def test_tables_1_7_8_carry_the_paper_only_systems_marked_as_not_run():
    row = {
        "run": "r",
        "path": "p",
        "benchmark": "longmemeval",
        "method": "mem0",
        "w": None,
        "n": 50,
        "stage": None,
        "questions": 2,
        "judged": 2,
        "errors": 0,
        "not_applicable": False,
        "accuracy": 0.5,
        "accuracy_judged": 0.5,
        "f1": None,
        "judge": None,
        "accuracy_by_type": {"multi-session": 0.5},
        "correct": {"q1": True, "q2": False},
        "memory_tokens": {"mean": 10.0},
        "latency_s": {},
        "gate_format_rate": None,
        "format_rate_table3": None,
        "windows": 0,
        "all_at_n": None,
        "all_at_n_source": None,
        "memory_model": None,
        "write_cost": rows()[0]["write_cost"],
    }
    tables = {t.key: t for t in build_tables([row], load_references())}
    reasons = not_run()
    for key in ("table1_longmemeval", "table7_memory_tokens", "table8_longmemeval"):
        labels = [labels[0] for labels, _ in tables[key].rows]
        assert labels[0] == "mem0"  # ours, measured
        marked = [x for x in labels if x.endswith("(paper-reported, not run)")]
        assert len(marked) == len(reasons) and "LightMem (paper-reported, not run)" in marked
        assert all(c.ours is None for labels, cells in tables[key].rows[1:] for c in cells)  # never ours
        assert "lightmem (" in tables[key].note
    lightmem = next(
        cells for labels, cells in tables["table1_longmemeval"].rows if labels[0].startswith("Light")
    )
    paper_lj = load_references()["table1_accuracy"]["rows"]["lightmem"]["longmemeval"]["LJ"]
    assert any(c.paper == paper_lj for c in lightmem)
    assert "write_cost" in tables
