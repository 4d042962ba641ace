"""The test-id guard: no training or selection stage may hold a question of the test split.

After such a stage (reads_test false) finishes, its run directory's training data is read back: the files
its task declares (the task contract's `training_files`, e.g. build_sft's annotations.jsonl and
lazymem_sft*.json, build_rl's parquet files), JSON and JSON-lines rows with a `question_id` and parquet rows
with an `extra_info.question_id`. One test id among them fails the stage.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from pathlib import Path


def held_out_ids(split: Path) -> set[str]:
    """The test ids of a split.json (or of the split.json inside a split run's directory)."""
    path = split / "split.json" if split.is_dir() else split
    return {str(q) for q in json.loads(path.read_text(encoding="utf-8"))["test"]}


def _question_ids(path: Path) -> Iterator[str]:
    if path.suffix == ".parquet":
        import pyarrow.parquet as pq

        table = pq.read_table(path)
        if "extra_info" not in table.column_names:
            return
        for info in table.column("extra_info").to_pylist():
            if isinstance(info, dict) and info.get("question_id") is not None:
                yield str(info["question_id"])
        return
    text = path.read_text(encoding="utf-8")
    rows = (
        [json.loads(line) for line in text.splitlines() if line.strip()] if path.suffix == ".jsonl" else None
    )
    for row in rows if rows is not None else json.loads(text):
        if isinstance(row, dict) and row.get("question_id") is not None:
            yield str(row["question_id"])


def data_files(run_dir: Path, patterns: Iterable[str]) -> list[Path]:
    return sorted({p for pattern in patterns for p in run_dir.rglob(pattern) if p.is_file()})


def leaks(run_dir: Path, split: Path, patterns: Iterable[str]) -> str | None:
    """None, or one line naming the files of `run_dir` matching `patterns` (glob patterns, at any depth)
    that hold test ids of `split`, and some ids."""
    test = held_out_ids(split)
    found = {}
    for path in data_files(run_dir, patterns):
        ids = sorted(set(_question_ids(path)) & test)
        if ids:
            found[path] = ids
    if not found:
        return None
    named = "; ".join(
        f"{p.relative_to(run_dir)}: {len(ids)} ({', '.join(ids[:3])})" for p, ids in found.items()
    )
    return (
        f"test question ids of {split} in a training stage's data: {named}. Build it from the train and "
        "val splits only (data.split_file, data.split)"
    )
