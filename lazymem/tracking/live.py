"""Per-question rows for W&B's history while a task runs: a multi-hour main_table is watchable live.

Each evaluated question (its record, eval/records.Record) gives one row at the next step, under
`live/<benchmark>/<method>/`: the running LJ accuracy, question and error counts of that method so far,
and this question's correctness, memory tokens, stage latencies and the share of its windows that passed
the strict gate (`gate_ok`) and Table 3's format check (`format_ok`). Only numbers are logged: no text of a
record (an error message could quote a secret) reaches the history.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass

from lazymem.eval.records import Record


@dataclass
class Running:
    questions: int = 0  # applicable ones
    right: int = 0
    errors: int = 0
    not_applicable: int = 0


class Live:
    def __init__(self):
        self.step = 0
        self.running: dict[str, Running] = defaultdict(Running)

    def row(self, record: Record, benchmark: str) -> dict[str, float | int]:
        """The history row of one finished question; advances the step."""
        self.step += 1
        prefix = f"live/{benchmark}/{record['method']}"
        r = self.running[prefix]
        row: dict[str, float | int] = {"live/questions": self.step}
        if record["status"] == "not_applicable":
            r.not_applicable += 1
            return row | {f"{prefix}/not_applicable": r.not_applicable}
        ok = record["status"] == "ok"
        right = ok and record.get("correct") is True
        r.questions += 1
        r.right += right
        r.errors += not ok
        row |= {
            f"{prefix}/accuracy": r.right / r.questions,
            f"{prefix}/questions": r.questions,
            f"{prefix}/errors": r.errors,
            f"{prefix}/correct": int(right),
        }
        if not ok:
            return row
        row[f"{prefix}/memory_tokens"] = record["memory_tokens"]
        row |= {f"{prefix}/latency/{stage}": s for stage, s in record["latency_s"].items()}
        windows = record["windows"]
        if windows:
            row[f"{prefix}/windows"] = len(windows)
            row[f"{prefix}/gate_ok"] = sum(w["outcome"] == "gate_ok" for w in windows) / len(windows)
            checked = [w["format_ok"] for w in windows if "format_ok" in w]
            if checked:
                row[f"{prefix}/format_ok"] = sum(map(bool, checked)) / len(checked)
        return row
