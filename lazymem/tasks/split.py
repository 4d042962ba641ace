"""task=split: the paper's stratified 360/40/100 LongMemEval split (Appendix D.1, Table 9).

Writes split.json ({"train": [ids], "val": [...], "test": [...]}) and the per-type count table
(split_counts.json and .md). Evaluation and training select a split with data.split=NAME, reading
data.split_file=<this split.json> or recomputing the same split from the data file.
"""

from __future__ import annotations

import json

from lazymem.data import load_dataset
from lazymem.data.stratified_split import SPLITS, count_table, make_split
from lazymem.preflight import data_problems
from lazymem.tasks.contract import Task


def problems(cfg) -> list[str]:
    """The data file, checked before a chain starts (lazymem/chain/preflight.py)."""
    return data_problems(cfg)


def run(cfg, run) -> dict:
    data = cfg.data.copy()
    data.split = None  # the split is made over the whole file
    data.limit = None
    ds = load_dataset(data)
    run.meta.add_dataset(ds.source)
    split, table = make_split(ds.questions, list(cfg.data.split_fractions), int(cfg.data.split_seed))
    counts = count_table(table)
    (run.dir / "split.json").write_text(json.dumps(split, indent=1) + "\n")
    (run.dir / "split_counts.json").write_text(json.dumps(counts, indent=2) + "\n")
    md = render(counts)
    (run.dir / "split_counts.md").write_text(md + "\n")
    print(md)
    return counts


def render(counts: dict) -> str:
    lines = ["| question type | total | " + " | ".join(SPLITS) + " |", "|---|---:|---:|---:|---:|"]
    for qtype, row in counts.items():
        lines.append(f"| {qtype} | {row['total']} | " + " | ".join(str(row[s]) for s in SPLITS) + " |")
    return "\n".join(lines)


TASK = Task(run, problems=problems)
