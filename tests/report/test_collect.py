import csv
import io
import json
from types import SimpleNamespace

import pytest
from omegaconf import OmegaConf

from lazymem.eval.summary import SummaryError
from lazymem.report.collect import find_runs, load_runs, rows
from lazymem.report.dashboard import render
from lazymem.report.plots import make_plots, pareto_frontier
from lazymem.report.tables import build_tables, load_references
from lazymem.tasks import report as report_task

from helpers_runs import EVIL, sweep_records, write_run

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


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


def test_tables_put_paper_numbers_beside_ours(sweep):
    tables = {t.key: t for t in build_tables(rows(load_runs([sweep])))}
    assert set(tables) == {
        "write_cost",
        "table1_longmemeval",
        "table2_radius",
        "table7_memory_tokens",
        "table8_longmemeval",
    }
    t1 = tables["table1_longmemeval"].markdown()
    # run, method, n, judged, errors, types, LJ (paper), LJ 95% CI low/high, LJ judged
    row = "| 1 | lazymem_4b | 2 | 2 | 0 | 1.00 (0.94) | 1.00 (0.67) | 1.00 (0.85) | 1.00 | 1.00 | 1.00 |"
    assert row in t1
    t2 = tables["table2_radius"].markdown()
    # benchmark, method, w, run, LJ (paper), ΔLJ vs w=0 with its paired 95% CI (blank on w=0), All@50 (paper)
    assert "| longmemeval | lazymem_4b | 0 | 0 | 0.50 (0.77) | – | – | – | 0.500 (0.950) |" in t2
    assert "| longmemeval | lazymem_4b | 1 | 1 | 1.00 (0.82) | 0.50 | 0.00 | 1.00 | 1.000 (0.970) |" in t2
    assert "rag_top50" not in t2  # no windows: not part of the radius ablation
    assert "210 (213)" in tables["table7_memory_tokens"].markdown()
    assert "42.00 (40.86)" in tables["table8_longmemeval"].markdown()


def test_csv_has_ours_and_paper_columns(sweep):
    t = next(t for t in build_tables(rows(load_runs([sweep]))) if t.key == "table2_radius")
    got = list(csv.DictReader(io.StringIO(t.csv())))
    assert [r["w"] for r in got] == ["0", "1"]
    assert got[0]["LJ"] == "0.5" and got[0]["LJ_paper"] == "0.77"
    assert got[1]["All@50"] == "1" and got[1]["All@50_paper"] == "0.97"


def test_single_w_has_no_table2_and_stage_label_makes_table3(tmp_path):
    write_run(tmp_path / "a", 1, sweep_records(1), stage="sft")
    write_run(tmp_path / "b", 1, sweep_records(1), stage="rl")
    tables = {t.key: t for t in build_tables(rows(load_runs([tmp_path])))}
    assert "table2_radius" not in tables
    t3 = tables["table3_longmemeval"].markdown()
    assert "| sft | lazymem_4b | a | 1.00 (0.94) | 1.00 (0.56) |" in t3
    assert "| 1.00 (0.73) | – | – | – |" in t3  # sft, the first stage: the reference of ΔLJ
    assert "| 1.00 (0.85) | 0.00 | 0.00 | 0.00 |" in t3  # rl answers as sft did: Δ 0, CI [0, 0]
    paths = make_plots(rows(load_runs([tmp_path])), load_references(), tmp_path)
    assert "accuracy_by_stage.png" in [p.name for p in paths]


def test_pareto_frontier():
    pts = [(100, 0.8), (50, 0.7), (200, 0.9), (150, 0.75), (50, 0.6), (300, 0.9), (10, 0.5)]
    assert pareto_frontier(pts) == [6, 1, 0, 2]  # x increasing, each better than everything cheaper
    assert pareto_frontier([]) == []
    assert pareto_frontier([(1, 1)]) == [0]


def test_plots_are_pngs(sweep, tmp_path):
    out = tmp_path / "plots"
    out.mkdir()
    paths = make_plots(rows(load_runs([sweep])), load_references(), out)
    assert sorted(p.name for p in paths) == [
        "accuracy_by_radius.png",
        "accuracy_vs_total_cost_longmemeval.png",
        "figure2_longmemeval.png",
    ]
    for p in paths:
        assert p.read_bytes()[:8] == PNG_MAGIC and p.stat().st_size > 5000


def test_dashboard_escapes_model_output(sweep, tmp_path):
    runs = load_runs([sweep])
    flat = rows(runs)
    page = render(build_tables(flat), make_plots(flat, load_references(), tmp_path), runs)
    assert "<script>alert" not in page and "</script><script>" not in page
    assert page.count("data:image/png;base64,") == 3
    data = page.split('id="report-data">')[1].split("</script>")[0]
    records = json.loads(data)["records"]
    assert len(records) == 8 and EVIL in records[0]["memory"]
    assert "http://" not in page and "https://" not in page  # nothing fetched from outside


def test_report_task_writes_everything(sweep, tmp_path, capsys):
    out = tmp_path / "out"
    out.mkdir()
    cfg = OmegaConf.create({"task": "report", "report": {"inputs": [str(sweep)]}})
    result = report_task.run(cfg, SimpleNamespace(dir=out))
    assert len(result["runs"]) == 2
    for name in ("report.md", "table1_longmemeval.csv", "table2_radius.csv", "dashboard.html",
                 "figure2_longmemeval.png", "accuracy_by_radius.png"):  # fmt: skip
        assert (out / name).is_file(), name
    assert "Table 2" in capsys.readouterr().out


def test_report_task_needs_inputs(tmp_path):
    with pytest.raises(SystemExit, match=r"report.inputs=\["):
        report_task.run(OmegaConf.create({"task": "report"}), SimpleNamespace(dir=tmp_path))
