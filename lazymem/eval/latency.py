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


class LatencyRuns:
    def __init__(self, path: Path):
        self.path = Path(path)
        self.runs: dict[tuple[str, str, int], dict] = {}
        if not self.path.exists():
            return
        text = self.path.read_text()
        kept = []
        for line in text.splitlines():
            try:
                row = json.loads(line)
            except json.JSONDecodeError:
                continue  # a torn line of a killed run
            self.runs[(row["method"], row["qid"], row["pass"])] = row["latency_s"]
            kept.append(line)
        if len(kept) != len(text.splitlines()) or (text and not text.endswith("\n")):
            tmp = self.path.with_suffix(".jsonl.tmp")
            tmp.write_text("".join(f"{line}\n" for line in kept))
            os.replace(tmp, self.path)  # appends must start on a fresh line

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
