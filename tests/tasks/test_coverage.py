"""task=coverage through the CLI: All@N per radius on synthetic data and on real LoCoMo."""

import json

from helpers import run_cli


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
