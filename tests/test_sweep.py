"""Sweep summaries (lazymem/sweep.py): the jobs over their error budget are named."""

import json

from lazymem.sweep import summarize_sweep


def test_sweep_summary_lists_jobs_over_their_error_budget(tmp_path):
    metas = {
        "0": {"status": "ok"},
        "1": {"status": "partial", "questions": {"error_rate": 0.1, "max_error_rate": 0.2}},
        "2": {"status": "partial", "questions": {"error_rate": 0.5, "max_error_rate": 0.2}},
        "3": {"status": "interrupted"},
    }
    for job, m in metas.items():
        (tmp_path / job).mkdir()
        (tmp_path / job / "meta.json").write_text(json.dumps(m))
    summary = summarize_sweep(tmp_path)
    assert summary["ok"] == 2 and summary["failed"] == ["2", "3"]
