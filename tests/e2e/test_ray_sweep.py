"""Sweeps as jobs on a real local Ray cluster, with a failing job and an aggregated report.

The radius sweep's jobs answer from the LLM stand-in (tests/standin.py): what is tested is Ray, the sweep
and the report, not a model (tests/e2e/test_evaluate.py and tests/test_runner.py serve real ones)."""

import json

import pytest

from helpers import run_cli

pytestmark = pytest.mark.slow
RAY_ENV = {"RAY_AUTH_MODE": "disabled", "RAY_DEDUP_LOGS": "0"}


def test_failed_job_is_reported_and_the_other_completes(tmp_path):
    out = run_cli(
        "-m",
        "+launcher=ray_local",
        "task=stats,nope",
        "data.loader.per_type=1",
        f"hydra.sweep.dir={tmp_path}",
        env=RAY_ENV,
    )
    assert out.returncode != 0
    assert "1 of 2 jobs failed" in out.stderr
    summary = json.loads((tmp_path / "sweep_summary.json").read_text())
    assert summary["ok"] == 1 and summary["failed"] == ["1"]
    jobs = {j["job"]: j for j in summary["jobs"]}
    assert jobs["0"]["status"] == "ok" and (tmp_path / "0" / "stats.json").exists()
    assert jobs["1"]["status"] == "failed" and "unknown task 'nope'" in jobs["1"]["error"]


def test_radius_sweep_on_ray_and_its_report(tmp_path):
    sweep = tmp_path / "sweep"
    out = run_cli(
        "-m",
        "+launcher=ray_local",
        "+experiment=radius_ablation_cpu",
        "w=0,1",
        "data.loader.per_type=1",
        "data.loader.abstention=0",
        "data.limit=2",
        "retrieval.n=3",
        f"hydra.sweep.dir={sweep}",
        env={**RAY_ENV, "LAZYMEM_CACHE": str(tmp_path / "cache")},
        timeout=900,
        standin=True,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    summary = json.loads((sweep / "sweep_summary.json").read_text())
    assert summary["ok"] == 2 and summary["failed"] == []
    radii = set()
    for job in ("0", "1"):
        config = (sweep / job / "config.yaml").read_text()
        radii.add(next(line for line in config.splitlines() if line.startswith("w:")))
        records = [json.loads(x) for x in (sweep / job / "records.jsonl").read_text().splitlines()]
        assert len(records) == 2 and all(r["status"] == "ok" for r in records)
    assert radii == {"w: 0", "w: 1"}
    report = run_cli("task=report", f"report.inputs=[{sweep}]", f"hydra.run.dir={tmp_path}/report")
    assert report.returncode == 0, report.stderr[-3000:]
    md = (tmp_path / "report" / "report.md").read_text()
    assert "Table 2" in md and (tmp_path / "report" / "dashboard.html").exists()
