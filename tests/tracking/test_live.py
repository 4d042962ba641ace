"""Live rows (lazymem/tracking/live.py): running accuracy and this question's numbers per benchmark and
method."""

from __future__ import annotations

import matplotlib

from lazymem.tracking.live import Live

from helpers_runs import (
    tracked_record,
)

matplotlib.use("Agg")


def test_live_rows_hold_running_accuracy_and_this_question(tmp_path):
    live = Live()
    windows = [{"outcome": "gate_ok", "format_ok": True}, {"outcome": "fallback", "format_ok": False}]
    first = live.row(tracked_record("q1", "lazymem", "x", True, tokens=50, windows=windows), "synthetic")
    assert live.step == 1 and first["live/questions"] == 1
    p = "live/synthetic/lazymem"
    assert first[f"{p}/accuracy"] == 1.0 and first[f"{p}/correct"] == 1 and first[f"{p}/memory_tokens"] == 50
    assert first[f"{p}/gate_ok"] == 0.5 and first[f"{p}/format_ok"] == 0.5 and first[f"{p}/windows"] == 2
    assert first[f"{p}/latency/processing"] == 0.4 and first[f"{p}/errors"] == 0
    failed = live.row(tracked_record("q2", "lazymem", "x", None, status="error"), "synthetic")
    assert (
        failed[f"{p}/accuracy"] == 0.5 and failed[f"{p}/errors"] == 1 and f"{p}/memory_tokens" not in failed
    )
    other = live.row(tracked_record("q1", "rag", "x", False), "locomo")  # no windows: no gate share
    assert other["live/locomo/rag/accuracy"] == 0.0 and "live/locomo/rag/gate_ok" not in other
    skipped = live.row(
        {**tracked_record("q3", "lazymem", "x", None), "status": "not_applicable"}, "synthetic"
    )
    assert skipped == {"live/questions": 4, f"{p}/not_applicable": 1} and live.step == 4
    assert all(isinstance(v, int | float) for row in (first, failed, other) for v in row.values())
