"""records.jsonl: one JSON line per (method, question), appended as soon as the question finishes.

Resume: reopening with `resume=True` keeps the finished (`ok`, `not_applicable`) records, drops `error`
ones (they are retried) and any torn last line left by a killed process, rewrites the file atomically,
then appends. A key is never written twice, and after SIGINT/SIGTERM no error record is (see interrupt.py).
"""

from __future__ import annotations

import json
import logging
import os
from collections import Counter
from pathlib import Path
from typing import Any, NotRequired, TypedDict

from lazymem import interrupt

log = logging.getLogger(__name__)
FINAL = ("ok", "not_applicable")  # statuses a resumed run keeps; errors are retried


class Record(TypedDict):
    """One (method, question) line of task=evaluate (eval/pipeline.evaluate_question).

    Every method fills the same fields: `retrieved`, `retrieval_scores`, `windows` and `decided` are empty
    when the method retrieves or decides nothing. `detail` holds a method's own extras that no metric reads
    (NanoMemory's ranked sessions, FullHistory's budget, ...). A question that failed or does not apply
    (`status` error / not_applicable) stops after `error`; the rest is there when `status` is ok.
    """

    qid: str
    method: str
    type: str
    abstention: bool
    question: str
    reference: str
    query_time: str
    gold_idx: list[int]
    scores: dict[str, float | None]  # the benchmark's model-free metrics of the answer (e.g. f1)
    status: str  # ok | error | not_applicable
    error: str | None
    traceback: NotRequired[str]  # an unexpected exception's
    memory: NotRequired[str]
    memory_style: NotRequired[str]  # compressed | raw
    shown: NotRequired[list[int]]  # message indices whose content reached the memory
    memory_tokens: NotRequired[int]
    retrieved: NotRequired[list[int]]  # message indices retrieval returned, best first
    retrieval_scores: NotRequired[list[float]]  # their retrieval scores
    windows: NotRequired[list[dict[str, Any]]]  # construct/processor.WindowResult.to_record()
    decided: NotRequired[list[int]]  # message indices the memory model decided KEEP or DROP on
    detail: NotRequired[dict[str, Any]]
    answer: NotRequired[str]
    answer_thinking: NotRequired[str | None]
    correct: NotRequired[bool | None]  # None: the judge gave no label
    judge_raw: NotRequired[str | None]
    contains_reference: NotRequired[bool | None]
    latency_s: NotRequired[dict[str, float]]  # per stage and total, seconds
    build_s: NotRequired[float]
    latency_runs: NotRequired[list[dict[str, float]]]  # every timed pass (added when summarizing)


class RecordsExist(RuntimeError):
    pass


class Records:
    def __init__(self, path: Path, resume: bool = False):
        self.path = Path(path)
        self.kept: dict[tuple[str, str], dict] = {}
        self.dropped = {"errors": 0, "torn_lines": 0}
        if self.path.exists() and self.path.stat().st_size:
            if not resume:
                raise RecordsExist(
                    f"{self.path} already holds records: pass resume=true to continue that run, "
                    "or choose another hydra.run.dir"
                )
            self._compact()

    def _compact(self) -> None:
        for line in self.path.read_text().splitlines():
            try:
                rec = json.loads(line)
            except json.JSONDecodeError:
                self.dropped["torn_lines"] += 1
                continue
            if rec.get("status") in FINAL:
                self.kept[(rec["method"], rec["qid"])] = rec
            else:
                self.dropped["errors"] += 1
        tmp = self.path.with_suffix(".jsonl.tmp")
        with open(tmp, "w") as f:
            for rec in self.kept.values():
                f.write(json.dumps(rec, ensure_ascii=False) + "\n")
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, self.path)

    def done(self, method: str, qid: str) -> bool:
        return (method, qid) in self.kept

    def append(self, record: dict) -> None:
        if record["status"] not in FINAL:
            interrupt.check()  # an error caused by a signal stopping the servers is not recorded
        key = (record["method"], record["qid"])
        if key in self.kept:
            raise ValueError(f"record {key} already written")
        with open(self.path, "a") as f:
            f.write(json.dumps(record, ensure_ascii=False) + "\n")
            f.flush()
            os.fsync(f.fileno())
        if record["status"] in FINAL:
            self.kept[key] = record


def read_records(path: Path) -> list[dict]:
    """Every complete line of a records file; a torn line is skipped with a warning."""
    out, torn = [], 0
    for line in Path(path).read_text().splitlines():
        try:
            out.append(json.loads(line))
        except json.JSONDecodeError:
            torn += 1
    if torn:
        log.warning(
            "%s: skipped %d unreadable line(s) (torn by a killed run?); resume=true drops them", path, torn
        )
    return out


def status_counts(run_dir: Path) -> Counter | None:
    """How many records of each status the run's records.jsonl files hold (None when it wrote none)."""
    paths = sorted(Path(run_dir).rglob("records.jsonl"))
    if not paths:
        return None
    return Counter(r.get("status") for p in paths for r in read_records(p))
