"""records.jsonl: one JSON line per (method, question), appended as soon as the question finishes.

Resume: reopening with `resume=True` keeps the finished (`ok`, `not_applicable`) records, drops `error`
ones (they are retried) and any torn last line left by a killed process, rewrites the file atomically,
then appends. A key is never written twice.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

FINAL = ("ok", "not_applicable")  # statuses a resumed run keeps; errors are retried


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
    """Every complete line of a records file (a torn last line is skipped)."""
    out = []
    for line in Path(path).read_text().splitlines():
        try:
            out.append(json.loads(line))
        except json.JSONDecodeError:
            continue
    return out
