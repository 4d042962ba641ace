"""Find finished run directories and flatten them into one row per (run, benchmark, method).

A run directory holds config.yaml and summary.json (lazymem/eval/summary.py, read with its reader). Each
benchmark's records.jsonl (and coverage.json) lies in a subdirectory of the benchmark's name
(task=main_table), or in the run directory itself (task=evaluate). A path given to `find_runs` may be a
run directory or any folder above run directories (a sweep with numbered subdirectories).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from lazymem.eval.records import Record, read_records
from lazymem.eval.summary import FILE, BenchmarkSummary, Summary, read_summary
from lazymem.report.costs import write_cost

MAX_DEPTH = 4


@dataclass
class Run:
    path: Path
    name: str
    config: dict
    summary: Summary
    records: dict[str, list[Record]] = field(default_factory=dict)  # benchmark -> records
    coverage: dict[str, dict] = field(default_factory=dict)  # benchmark -> coverage.json

    @property
    def summaries(self) -> dict[str, BenchmarkSummary]:
        return self.summary["benchmarks"]

    def get(self, dotted: str, default=None):
        node = self.config
        for part in dotted.split("."):
            if not isinstance(node, dict) or part not in node:
                return default
            node = node[part]
        return node


def _natural(path: Path):
    return [int(t) if t.isdigit() else t for t in re.split(r"(\d+)", path.name)]


def is_run_dir(path: Path) -> bool:
    return (path / FILE).is_file() and (path / "config.yaml").is_file()


def find_runs(paths) -> list[Path]:
    """Run directories at or below the given paths, in natural order (2 before 10), each once."""
    found: list[Path] = []

    def walk(p: Path, depth: int):
        if is_run_dir(p):
            found.append(p)
            return
        if depth >= MAX_DEPTH:
            return
        for child in sorted((c for c in p.iterdir() if c.is_dir()), key=_natural):
            walk(child, depth + 1)

    for raw in paths:
        p = Path(raw).expanduser()
        if not p.is_dir():
            raise FileNotFoundError(f"report input {p} is not a directory")
        walk(p, 0)
    return list(dict.fromkeys(p.resolve() for p in found))


def _beside(path: Path, bench: str, name: str) -> Path:
    """A benchmark's own file: in its subdirectory when there is one, else in the run directory."""
    own = path / bench / name
    return own if own.is_file() else path / name


def load_run(path: Path, name: str | None = None) -> Run:
    path = Path(path)
    config = yaml.safe_load((path / "config.yaml").read_text()) or {}
    run = Run(path=path, name=name or path.name, config=config, summary=read_summary(path))
    for bench in run.summaries:
        records = _beside(path, bench, "records.jsonl")
        run.records[bench] = read_records(records) if records.is_file() else []
        coverage = _beside(path, bench, "coverage.json")
        if coverage.is_file():
            run.coverage[bench] = json.loads(coverage.read_text())
    return run


def load_runs(paths) -> list[Run]:
    """Load every run; runs whose directory names collide get their parent's name prefixed."""
    dirs = find_runs(paths)
    names = [d.name for d in dirs]
    runs = []
    for d in dirs:
        name = d.name if names.count(d.name) == 1 else f"{d.parent.name}/{d.name}"
        runs.append(load_run(d, name))
    return runs


def method_w(run: Run, method: str) -> int | None:
    """The window radius a method ran with: its own `radius`, else the run's top-level `w`."""
    for key in ("methods", "method"):
        node = run.get(key) or {}
        cfg = node.get(method) if key == "methods" else (node if node.get("name") == method else None)
        if isinstance(cfg, dict) and isinstance(cfg.get("radius"), int):
            return cfg["radius"]
    w = run.get("w")
    return w if isinstance(w, int) else None


def retrieval_n(run: Run) -> int | None:
    n = run.get("retrieval.n")
    return n if isinstance(n, int) else None


def all_at_n(run: Run, bench: str, method: str, w: int | None, summary: dict) -> tuple[float | None, str]:
    """All@n and where it came from.

    coverage.json (task=coverage) gives it directly for the radius. Otherwise the windows in the records
    are the retrieved messages expanded by w, so "every gold message lies in some window" is All@n. Methods
    without windows fall back to the summary's all-gold-in-memory, a stricter number (after construction).
    """
    cov = run.coverage.get(bench)
    if cov and w is not None and str(w) in cov.get("radii", {}):
        return cov["radii"][str(w)].get("all_at_n"), "coverage"
    hits = []
    for r in run.records.get(bench, []):
        if r.get("method") != method or r.get("status") != "ok" or not r.get("gold_idx"):
            continue
        windows = r.get("windows") or []
        if not windows:
            continue
        expanded = {i for win in windows for i in win.get("idx") or []}
        hits.append(set(r["gold_idx"]) <= expanded)
    if hits:
        return sum(hits) / len(hits), "windows"
    return summary.get("all_gold_in_memory"), "memory"


def correct_by_question(run: Run, bench: str, method: str) -> dict[str, bool]:
    """qid -> judged correct, over every question the method applies to (a failed one counts as wrong,
    as LJ does); the input of the tables' bootstrap intervals."""
    return {
        r["qid"]: r.get("correct") is True
        for r in run.records.get(bench, [])
        if r.get("method") == method and r.get("status") != "not_applicable"
    }


def rows(runs: list[Run]) -> list[dict]:
    """One flat row per (run, benchmark, method) with the numbers the tables and plots use."""
    out = []
    for run in runs:
        stage = run.get("stage")
        for bench, summary in run.summaries.items():
            for method, s in summary["methods"].items():
                w = method_w(run, method)
                cover, source = all_at_n(run, bench, method, w, s)
                lat = s.get("latency_s") or {}
                out.append(
                    {
                        "run": run.name,
                        "path": str(run.path),
                        "benchmark": bench,
                        "method": method,
                        "w": w,
                        "n": retrieval_n(run),
                        "stage": str(stage) if stage is not None else None,
                        "questions": s.get("questions"),
                        "judged": s.get("judged"),
                        "errors": s.get("errors"),
                        "not_applicable": bool(s.get("not_applicable")) and not s.get("ok"),
                        "accuracy": s.get("accuracy"),
                        "accuracy_judged": s.get("accuracy_judged"),
                        "f1": s.get("f1"),
                        "judge": summary.get("judge"),
                        "accuracy_by_type": s.get("accuracy_by_type") or {},
                        "correct": correct_by_question(run, bench, method),
                        "memory_tokens": s.get("memory_tokens") or {},
                        "latency_s": lat,
                        "gate_format_rate": s.get("gate_format_rate"),
                        "format_rate_table3": s.get("format_rate_table3"),
                        "windows": s.get("windows") or 0,
                        "all_at_n": cover,
                        "all_at_n_source": source,
                        "memory_model": run.get("llm.roles.memory.model"),
                        "write_cost": write_cost(
                            [r for r in run.records.get(bench, []) if r.get("method") == method]
                        ),
                    }
                )
    return out
