"""latency_runs.jsonl: the stage latencies of the timed passes after the first (paper Appendix C.2).

The first timed pass writes the per-question records (answers, judge labels); every later timed pass only
re-times the question, so it leaves one line here: method, question, pass number and `latency_s`. The
summary pools every timed pass. Lines are appended and fsynced as they finish; a resumed run keeps the
passes already timed and a torn last line is skipped, so no (method, question, pass) is counted twice.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from lazymem.eval.records import read_records


class LatencyRuns:
    def __init__(self, path: Path):
        self.path = Path(path)
        self.runs: dict[tuple[str, str, int], dict] = {}
        if not self.path.exists():
            return
        rows = read_records(self.path)  # complete lines only (a torn one is skipped with a warning)
        self.runs = {(r["method"], r["qid"], r["pass"]): r["latency_s"] for r in rows}
        # rewrite the complete lines: appends must start on a fresh line, not after a torn one
        tmp = self.path.with_suffix(".jsonl.tmp")
        tmp.write_text("".join(json.dumps(r) + "\n" for r in rows))
        os.replace(tmp, self.path)

    def done(self, method: str, qid: str, pass_no: int) -> bool:
        return (method, qid, pass_no) in self.runs

    def append(self, method: str, qid: str, pass_no: int, latency_s: dict) -> None:
        key = (method, qid, pass_no)
        if key in self.runs:
            raise ValueError(f"latency run {key} already written")
        row = {"method": method, "qid": qid, "pass": pass_no, "latency_s": latency_s}
        with open(self.path, "a") as f:
            f.write(json.dumps(row) + "\n")
            f.flush()
            os.fsync(f.fileno())
        self.runs[key] = latency_s

    def of(self, method: str, qid: str) -> list[dict]:
        """The later passes' latencies of one question, in pass order."""
        found = [(p, lat) for (m, q, p), lat in self.runs.items() if m == method and q == qid]
        return [lat for _, lat in sorted(found, key=lambda x: x[0])]
