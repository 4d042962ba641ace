"""results.md (lazymem/eval/results.py): every method and stage, and well-formed tables when nothing
succeeded."""

from lazymem.eval.metrics import summarize
from lazymem.eval.results import render_results

from helpers_runs import METRIC_RECORDS, metric_record


def test_results_render_every_method_and_stage():
    bench = {"dataset": "synthetic", "methods": {"m": summarize(METRIC_RECORDS), "empty": summarize([])}}
    server = {"kind": "vllm", "served_name": "qwen3-32b", "base_url": "http://127.0.0.1:8000/v1"}
    llm = {"answer": {"calls": 7, "cache_hits": 2, "errors": 1, "server": server}, "judge": {"calls": 1}}
    md = render_results(bench, llm=llm)
    assert "| m | 0.33 | 0.67 | 0.50 | 0.50 | 1.00 | 0.75 | – | 6 | 4 | 2 |" in md
    assert "judge: not recorded" in md and "## f1" not in md
    assert "| empty |" in md and "| answer | vllm: qwen3-32b | 7 | 2 | 1 |" in md
    assert "| judge | – | 1 | 0 | 0 |" in md  # stats recorded before servers were
    assert "0.600" in md  # gate format rate


def test_results_tables_stay_well_formed_when_no_question_succeeded():
    failed = [
        metric_record("q1", "single-hop", None, status="error"),
        metric_record("q2", "temporal", None, status="error"),
    ]
    md = render_results({"dataset": "locomo", "methods": {"m": summarize(failed)}})
    table = [line for line in md.split("## Memory")[0].splitlines() if line.startswith("|")]
    widths = {line.count("|") for line in table}
    assert len(table) == 3 and len(widths) == 1  # header, rule and row have the same number of cells
    assert "| m | 0.00 |" in md and "||" not in md  # LJ counts both failures as wrong
    empty = render_results({"dataset": "x", "methods": {"none": summarize([])}})  # no per-type columns
    rows = [line for line in empty.split("## Memory")[0].splitlines() if line.startswith("|")]
    assert len({line.count("|") for line in rows}) == 1 and "|  |" not in empty
