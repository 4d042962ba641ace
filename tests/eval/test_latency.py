"""latency_runs.jsonl: later timed passes, appended once each and kept across a resume."""

import json

import pytest

from lazymem.eval.latency import LatencyRuns


def test_passes_are_kept_in_order_and_survive_a_restart(tmp_path):
    path = tmp_path / "latency_runs.jsonl"
    runs = LatencyRuns(path)
    runs.append("m", "q1", 2, {"total": 3.0})
    runs.append("m", "q1", 1, {"total": 1.0})
    runs.append("m", "q2", 1, {"total": 5.0})
    with pytest.raises(ValueError, match="already written"):
        runs.append("m", "q1", 1, {"total": 9.0})
    with open(path, "a") as f:
        f.write('{"method": "m", "qid": "q2", "pa')  # a killed process leaves a torn line
    again = LatencyRuns(path)
    assert again.of("m", "q1") == [{"total": 1.0}, {"total": 3.0}]
    assert again.done("m", "q2", 1) and not again.done("m", "q2", 2) and again.of("x", "q1") == []
    again.append("m", "q2", 2, {"total": 6.0})
    lines = path.read_text().splitlines()
    assert json.loads(lines[-1])["pass"] == 2
