"""Finding and reading runs (lazymem/report/collect.py): sweep and main_table layouts, and rows carrying w
and All@N from windows or coverage.json."""

import json

import pytest

from lazymem.eval.summary import SummaryError
from lazymem.report.collect import find_runs, load_runs, rows

from helpers_runs import sweep_records, write_run


def test_find_runs_in_sweep_and_main_table_layout(sweep, tmp_path):
    mt = tmp_path / "mt"
    write_run(mt / "longmemeval", 1, sweep_records(1))  # then move config and summary up, as task=main_table
    for name in ("config.yaml", "summary.json"):  # writes them, the records staying in the benchmark's folder
        (mt / "longmemeval" / name).rename(mt / name)
    found = find_runs([sweep, mt])
    assert [p.name for p in found] == ["0", "1", "mt"]
    runs = load_runs([mt])
    assert list(runs[0].summaries) == ["longmemeval"] and len(runs[0].records["longmemeval"]) == 4
    assert runs[0].summary["task"] == "evaluate" and load_runs([sweep])[0].records["longmemeval"]


def test_a_summary_of_an_unknown_shape_is_an_error_naming_the_file(sweep):
    old = {"dataset": "longmemeval", "methods": {}}  # a summary of lazymem before eval/summary.py
    (sweep / "1" / "summary.json").write_text(json.dumps(old))
    with pytest.raises(SummaryError, match=r"sweep/1/summary.json: not a lazymem summary \(no 'task'"):
        load_runs([sweep])


def test_rows_carry_w_and_all_at_n_from_windows(sweep):
    flat = {(r["run"], r["method"]): r for r in rows(load_runs([sweep]))}
    assert flat[("0", "lazymem_4b")]["w"] == 0 and flat[("1", "lazymem_4b")]["w"] == 1
    assert flat[("0", "lazymem_4b")]["all_at_n"] == 0.5 and flat[("1", "lazymem_4b")]["all_at_n"] == 1.0
    assert flat[("0", "lazymem_4b")]["all_at_n_source"] == "windows"
    assert flat[("0", "rag_top50")]["all_at_n_source"] == "memory"


def test_coverage_json_wins_over_records(sweep):
    cov = {"n": 50, "radii": {"0": {"all_at_n": 0.9}, "1": {"all_at_n": 0.95}}}
    (sweep / "0" / "coverage.json").write_text(json.dumps(cov))
    flat = {(r["run"], r["method"]): r for r in rows(load_runs([sweep]))}
    assert flat[("0", "lazymem_4b")]["all_at_n"] == 0.9
    assert flat[("0", "lazymem_4b")]["all_at_n_source"] == "coverage"
