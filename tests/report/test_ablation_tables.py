"""Report tables for the appendix experiments (5/6, 11, 12) and the bootstrap CI columns of Tables 1-3."""

import csv
import io
import json

import pytest
import yaml

from lazymem.eval.metrics import summarize
from lazymem.eval.summary import summary, write_summary
from lazymem.numeric import bootstrap_ci
from lazymem.report import ablation_tables
from lazymem.report.collect import load_runs, rows
from lazymem.report.tables import build_tables, load_references

NANO = "lazymem.methods.nanomemory.NanoMemory"


def _record(qid, method, correct, extra=None, status="ok", detail=None):
    return {"qid": qid, "method": method, "type": "temporal", "abstention": False, "status": status,
            "error": None if status == "ok" else "boom", "correct": correct if status == "ok" else None,
            "memory_tokens": 10, "gold_idx": [1], "shown": [1], "contains_reference": None, "scores": {},
            "retrieved": [], "retrieval_scores": [], "windows": [], "decided": [], "detail": detail or {},
            "latency_s": {"retrieval": 0.1, "processing": 2.0, "answer": 1.0, "judge": 0.5, "total": 3.1},
            **(extra or {})}  # fmt: skip


def _write(path, config, records, tables=None):
    path.mkdir(parents=True)
    (path / "config.yaml").write_text(yaml.safe_dump(config))
    if tables is None:
        methods = {}
        for r in records:
            methods.setdefault(r["method"], []).append(r)
        methods = {m: summarize(rs) for m, rs in methods.items()}
        bench = {"dataset": "longmemeval", "judge": {}, "methods": methods, "resume_dropped": {}}
        write_summary(path, summary("evaluate", {"longmemeval": bench}))
    else:
        write_summary(path, summary(config["task"], tables=tables))
    (path / "records.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))


def _csv(table):
    return list(csv.DictReader(io.StringIO(table.csv())))


def test_table5_rows_per_depth_and_constructor_with_paper_numbers(tmp_path):
    for job, (k, constructor, role) in enumerate([(3, "qwen3_4b", "small"), (3, "qwen3_32b", "big")]):
        cfg = {"constructor": constructor, "data": {"name": "longmemeval"},
               "method": {"_target_": NANO, "name": "nanomemory", "top_sessions": k, "role": role},
               "llm": {"roles": {"small": {"model": "m4"}, "big": {"model": "m32"}}}}  # fmt: skip
        recs = [
            _record(f"q{i}", "nanomemory", i < job + 1, detail={"session_tokens": 100 * (i + 1)})
            for i in range(2)
        ]
        _write(tmp_path / "sweep" / str(job), cfg, recs)
    runs = load_runs([tmp_path / "sweep"])
    (table,) = ablation_tables.tables56(runs, load_references())
    assert table.key == "table56_longmemeval" and table.title.startswith("Table 5")
    got = _csv(table)
    assert [(r["top-k"], r["constructor"], r["model"]) for r in got] == [
        ("3", "qwen3_32b", "m32"),
        ("3", "qwen3_4b", "m4"),
    ]
    assert float(got[0]["Tok."]) == 150 and got[0]["Tok._paper"] == "7808"
    assert float(got[0]["LJ"]) == 1.0 and got[0]["LJ_paper"] == "0.71"
    assert float(got[1]["LJ"]) == 0.5 and got[1]["LJ_paper"] == "0.58"
    assert (got[0]["LJ CI low"], got[0]["LJ CI high"]) == ("1", "1")  # both answers right: no spread
    assert float(got[1]["LJ CI low"]) == 0 and float(got[1]["LJ CI high"]) == 1
    assert float(got[1]["filter mean"]) == 2.0 and got[1]["filter mean_paper"] == "17.55"


def test_runs_without_a_constructor_label_make_no_table5(tmp_path):
    cfg = {"method": {"_target_": NANO, "name": "nanomemory", "top_sessions": 3, "role": "memory"}}
    _write(tmp_path / "run", cfg, [_record("q", "nanomemory", True, detail={"session_tokens": 5})])
    assert ablation_tables.tables56(load_runs([tmp_path / "run"]), load_references()) == []


def test_tables_11_and_12_from_their_summaries(tmp_path):
    diag = {"rewards": {"micro": {"inversion": 0.5, "tie": 0.25, "gold_gap": 0.1},
                        "ours": {"inversion": 0.0, "tie": 0.0, "gold_gap": 0.8}},
            "n_valid": 7, "n_rollouts": 8, "n_prompts": 1, "n_conflict_pairs": 4,
            "n_gap_prompts": 1}  # fmt: skip
    _write(tmp_path / "runs" / "diag", {"task": "reward_rollouts"}, [], {"reward_diagnostics": diag})
    pert = {"variants": {
        "full_gold": {"questions": 4, "accuracy": 0.75, "delta": None, "c_to_i": None, "input_tokens": 700.0},
        "drop_one_gold": {"questions": 4, "accuracy": 0.25,
                          "delta": {"mean": -0.5, "low": -0.75, "high": -0.25},
                          "c_to_i": 2 / 3, "input_tokens": 600.0},
        "add_all_nongold": {"questions": 2, "accuracy": 0.5, "errors": 2,
                            "delta": {"mean": -0.25, "low": -0.5, "high": 0.0},
                            "c_to_i": 0.5, "input_tokens": 22500.0}}}  # fmt: skip
    _write(tmp_path / "runs" / "pert", {"task": "perturbation"}, [], {"perturbation": pert})
    runs = load_runs([tmp_path / "runs"])
    assert rows(runs) == []  # neither is an evaluate summary
    tables = {t.key: t for t in ablation_tables.build(runs, load_references())}
    t11, t12 = _csv(tables["table11_diag"]), _csv(tables["table12_pert"])
    assert [r["reward"] for r in t11] == ["Micro (Eq. 10)", "Ours (Eq. 12)"]
    assert (t11[0]["Inversion (%)"], t11[0]["Inversion (%)_paper"]) == ("50", "54.2")
    assert "7/8 format-valid rollouts" in tables["table11_diag"].note
    assert [r["memory"] for r in t12] == ["full_gold", "drop_one_gold", "add_all_nongold"]
    # the +all non-gold row's memories that failed (past the context) stand beside its accuracy
    all_nongold = [t12[2][k] for k in ("n", "Acc. (%)", "Acc. (%)_paper", "Err.")]
    assert all_nongold == ["2", "50", "42.5", "2"]
    assert t12[0]["Err."] == ""  # a summary written before errors were counted per row
    assert t12[0]["Δ (pp)"] == "" and t12[0]["Tok._paper"] == "728"
    assert (t12[1]["Δ (pp)"], t12[1]["Δ 95% low"], t12[1]["Δ 95% low_paper"]) == ("-50", "-75", "-74.2")
    assert float(t12[1]["C→I (%)"]) == pytest.approx(100 * 2 / 3, abs=1e-3)


def test_table1_has_the_lj_interval_and_ablations_a_paired_delta(tmp_path):
    for w in (0, 1):
        cfg = {"w": w, "stage": ["base", "rl"][w], "data": {"name": "longmemeval"}, "retrieval": {"n": 50},
               "methods": {"lazymem": {"name": "lazymem", "radius": w}}}  # fmt: skip
        win = [{"idx": [0, 1], "core": [0], "outcome": "gate_ok", "decisions": [], "raw": "[]"}]
        recs = [
            _record(f"q{i}", "lazymem", i < 5 + 10 * w, {"windows": win, "decided": [0, 1]})
            for i in range(20)
        ]
        recs.append(_record("q20", "lazymem", None, {"windows": win}, status="error"))  # counted wrong
        _write(tmp_path / "sweep" / str(w), cfg, recs)
    flat = rows(load_runs([tmp_path / "sweep"]))
    tables = {t.key: t for t in build_tables(flat)}
    t1 = _csv(tables["table1_longmemeval"])
    ci = bootstrap_ci([1] * 5 + [0] * 16)
    assert (float(t1[0]["LJ CI low"]), float(t1[0]["LJ CI high"])) == (
        float(f"{ci['low']:.6g}"), float(f"{ci['high']:.6g}")
    )  # fmt: skip
    for key in ("table2_radius", "table3_longmemeval"):
        got = _csv(tables[key])
        assert got[0]["ΔLJ"] == ""  # the reference row
        assert abs(float(got[1]["ΔLJ"]) - 10 / 21) < 1e-5
        assert 0 < float(got[1]["Δ CI low"]) < float(got[1]["ΔLJ"]) < float(got[1]["Δ CI high"])
