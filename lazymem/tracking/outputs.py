"""What a finished run directory holds, in the forms W&B takes: summary keys, tables, images, artifacts.

- summary.json (eval/summary.py, through its reader) -> summary keys `<benchmark>/<method>/accuracy`,
  `<benchmark>/<method>/by_type/<type>/accuracy`, `<benchmark>/<method>/latency/<stage>/p95`, ...,
  `llm/...` and each task table's numbers (`perturbation/...`); coverage.json -> `coverage/...`; the
  task's returned dict: its top-level scalars;
- records.jsonl of the run and of its benchmarks -> tables `records` / `<benchmark>/records` with
  RECORD_COLUMNS, long text clipped; *.csv (the paper tables) -> tables `tables/<name>`; *.png -> images;
- artifacts: the records (*.jsonl), the results (summary, config, meta, Markdown, CSV, plots, dashboard)
  and a reference to a trained checkpoint (its path only, never its gigabytes).
"""

from __future__ import annotations

import csv
import json
import logging
from dataclasses import dataclass, field
from pathlib import Path

from lazymem.eval.summary import FILE, SummaryError, read_summary

log = logging.getLogger("lazymem")

# the records table: one row per (method, question)
RECORD_COLUMNS = (
    "method",
    "qid",
    "type",
    "question",
    "reference",
    "answer",
    "correct",
    "memory_tokens",
    "latency_s",
    "status",
    "error",
)
MAX_CHARS = 1000  # longest text of one table cell or summary string
MAX_IMAGES = 50
MAX_CSV_TABLES = 30
SKIP_DIRS = ("wandb", "servers")  # never scanned for outputs (W&B's own files, model-server logs)
RESULT_SUFFIXES = (".json", ".yaml", ".md", ".csv", ".png", ".html")


def clip(value, max_chars: int = MAX_CHARS):
    if value is None:
        return None
    text = value if isinstance(value, str) else str(value)
    return text if len(text) <= max_chars else text[: max_chars - 1] + "…"


def flatten(node, prefix: str = "") -> dict:
    """Nested dicts -> {"a/b/c": scalar}; lists and None are left out, long strings clipped."""
    out: dict = {}
    if isinstance(node, dict):
        for k, v in node.items():
            out.update(flatten(v, f"{prefix}/{k}" if prefix else str(k)))
    elif isinstance(node, bool | int | float) and prefix:
        out[prefix] = node
    elif isinstance(node, str) and prefix:
        out[prefix] = clip(node)
    return out


def flatten_method(summary: dict, prefix: str) -> dict:
    """One method's summary (eval/metrics.py): X_by_type -> by_type/<type>/X (accuracy, f1),
    latency_s -> latency/<stage>/<stat>, the rest as nested keys; free-text error messages left out."""
    out: dict = {}
    for k, v in summary.items():
        if k == "error_messages":
            continue
        if k.endswith("_by_type") and isinstance(v, dict):  # accuracy_by_type, f1_by_type, ...
            metric = k.removesuffix("_by_type")
            out.update({f"{prefix}/by_type/{t}/{metric}": a for t, a in v.items() if a is not None})
        elif k == "latency_s":
            out.update(flatten(v, f"{prefix}/latency"))
        else:
            out.update(flatten(v, f"{prefix}/{k}"))
    return out


def flatten_summary(summary: dict) -> dict:
    """A Summary -> flat summary keys: `<benchmark>/<method>/...`, `<benchmark>/judge/...`, `llm/...`,
    `task`, and each task table under its own name."""
    out = flatten({"task": summary["task"], "llm": summary["llm"], **summary["tables"]})
    for bench, s in summary["benchmarks"].items():
        for method, m in s["methods"].items():
            out.update(flatten_method(m, f"{bench}/{method}"))
        out.update(flatten({k: v for k, v in s.items() if k != "methods"}, bench))
    return out


def result_summary(result) -> dict:
    """The task's returned dict: its top-level scalars (nested parts are in the files it wrote)."""
    if not isinstance(result, dict):
        return {}
    return {
        str(k): v for k, v in flatten({k: v for k, v in result.items() if not isinstance(v, dict)}).items()
    }


def benchmarks(run_dir: Path) -> list[str]:
    """The benchmarks summary.json names (none when the task writes no summary, or an unreadable one)."""
    if not (run_dir / FILE).is_file():
        return []
    try:
        return list(read_summary(run_dir)["benchmarks"])
    except SummaryError as e:
        log.warning("tracking: %s", e)
        return []


def outputs_summary(run_dir: Path, result=None) -> dict:
    """Every summary key the run directory and the returned dict give."""
    out = result_summary(result)
    if (run_dir / FILE).is_file():
        try:
            out.update(flatten_summary(read_summary(run_dir)))
        except SummaryError as e:
            log.warning("tracking: %s", e)
    coverage = run_dir / "coverage.json"
    if coverage.is_file():
        try:
            out.update(flatten(json.loads(coverage.read_text()), "coverage"))
        except (OSError, json.JSONDecodeError) as e:
            log.warning("tracking: %s unreadable: %s", coverage, e)
    return out


def record_row(record: dict) -> list:
    """One records.jsonl line -> a row of RECORD_COLUMNS (latency: the total seconds)."""
    latency = record.get("latency_s")
    if isinstance(latency, dict):
        latency = latency.get("total")
    return [
        record.get("method"),
        record.get("qid"),
        record.get("type"),
        clip(record.get("question")),
        clip(record.get("reference")),
        clip(record.get("answer")),
        record.get("correct"),
        record.get("memory_tokens"),
        latency,
        record.get("status"),
        clip(record.get("error")),
    ]


def record_rows(records: list[dict], max_records: int | None) -> list[list]:
    if max_records is not None:
        records = records[: int(max_records)]
    return [record_row(r) for r in records]


def records_files(run_dir: Path) -> dict[str, Path]:
    """records.jsonl of the run and of its benchmarks' subdirectories (task=main_table): key -> path."""
    found = {}
    if (run_dir / "records.jsonl").is_file():
        found["records"] = run_dir / "records.jsonl"
    for bench in benchmarks(run_dir):
        if (run_dir / bench / "records.jsonl").is_file():
            found[f"{bench}/records"] = run_dir / bench / "records.jsonl"
    return found


def _skipped(path: Path, run_dir: Path) -> bool:
    parts = path.relative_to(run_dir).parts[:-1]
    return any(p in SKIP_DIRS or p.startswith(".") for p in parts)


def images(run_dir: Path) -> dict[str, Path]:
    """*.png under the run directory (W&B's own folder left out): `plots/<relative path>` -> path."""
    found = {}
    for path in sorted(run_dir.rglob("*.png")):
        if len(found) >= MAX_IMAGES:
            break
        if not _skipped(path, run_dir):
            found["plots/" + path.relative_to(run_dir).with_suffix("").as_posix()] = path
    return found


def _cell(text: str):
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    return clip(text)


def csv_rows(path: Path, max_rows: int | None) -> tuple[list[str], list[list]]:
    with open(path, newline="") as f:
        rows = list(csv.reader(f))
    if not rows:
        return [], []
    header, body = rows[0], rows[1:]
    if max_rows is not None:
        body = body[: int(max_rows)]
    return header, [[_cell(c) for c in r] + [None] * (len(header) - len(r)) for r in body]


@dataclass
class ArtifactSpec:
    """One W&B artifact: files (name inside the artifact -> path) or references to big folders."""

    kind: str  # the artifact type: records | results | model
    files: dict[str, Path] = field(default_factory=dict)
    references: list[Path] = field(default_factory=list)


def artifacts(run_dir: Path, result=None) -> list[ArtifactSpec]:
    """The run's records, its results, and the checkpoint a training task returned (by reference)."""
    folders = [run_dir] + [run_dir / b for b in benchmarks(run_dir) if (run_dir / b).is_dir()]
    records, results = ArtifactSpec("records"), ArtifactSpec("results")
    for folder in folders:
        for path in sorted(p for p in folder.iterdir() if p.is_file()):
            name = path.relative_to(run_dir).as_posix()
            if path.suffix == ".jsonl":
                records.files[name] = path
            elif path.suffix in RESULT_SUFFIXES:
                results.files[name] = path
    out = [a for a in (records, results) if a.files]
    found = result if isinstance(result, dict) else {}
    checkpoint = found.get("selected_checkpoint") or found.get("checkpoint")  # train_grpo / train_sft
    if checkpoint and Path(checkpoint).exists():
        out.append(ArtifactSpec("model", references=[Path(checkpoint).resolve()]))
    return out
