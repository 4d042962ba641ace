"""summary.json: what a run found, in one shape for every task, and the one reader of it.

    {"task": "evaluate",
     "benchmarks": {"longmemeval": {"dataset", "judge", "methods": {"lazymem": {...}}, "resume_dropped"}},
     "llm": {role: call stats, "server_restarts": ...},
     "tables": {"perturbation": {...}}}

`benchmarks` maps each benchmark a task evaluated to its per-method metrics (eval/metrics.py), also when
there is only one (task=evaluate); `tables` holds a task's own result tables (Table 11's reward ordering,
Table 12's perturbations) for task=report to render again. Writers build a Summary with `summary()` and
`write_summary`; report/collect.py, tracking and task=main_table read it with `read_summary`.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, TypedDict

FILE = "summary.json"
# the task tables task=report knows how to render
TABLES = ("perturbation", "reward_diagnostics", "construction")


class SummaryError(ValueError):
    pass


class Stat(TypedDict):
    """lazymem.numeric.describe of a list of numbers."""

    n: int
    mean: float | None
    median: float | None
    p90: float | None
    p95: float | None
    max: float | None


class Construction(TypedDict):
    gold_decided: int
    gold_kept: float | None
    nongold_decided: int
    nongold_dropped: float | None
    kept_words_in_source: float | None  # share of the KEEP contents' words found in the kept message


class MethodSummary(TypedDict, total=False):
    """One method on one benchmark (eval/metrics.summarize). Model-free metrics of the benchmark (e.g. f1)
    add `<name>` and `<name>_by_type` keys."""

    questions: int
    not_applicable: int
    ok: int
    errors: int
    error_messages: dict[str, int]
    judged: int
    judge_errors: int
    accuracy: float | None
    accuracy_by_type: dict[str, float]
    accuracy_task_averaged: float | None
    abstention_accuracy: float | None
    accuracy_judged: float | None
    contains_reference: float | None
    memory_tokens: Stat
    latency_s: dict[str, Stat]
    windows: int
    gate_format_rate: float | None
    format_rate_table3: float | None
    window_outcomes: dict[str, int]
    gold_recall_in_memory: float | None
    all_gold_in_memory: float | None
    construction: Construction


class BenchmarkSummary(TypedDict):
    dataset: str | None  # the dataset's name (meta.json holds its path and sha256)
    judge: dict[str, Any]  # eval/judge.Judge.identity
    methods: dict[str, MethodSummary]
    resume_dropped: dict[str, int]  # records a resumed run dropped: errors (retried), torn lines


class Summary(TypedDict):
    task: str
    benchmarks: dict[str, BenchmarkSummary]
    llm: dict[str, Any]  # the run's LLM calls per role (llm/roles.LLMs.stats)
    tables: dict[str, dict]


def summary(task: str, benchmarks=None, llm=None, tables=None) -> Summary:
    return {
        "task": task,
        "benchmarks": dict(benchmarks or {}),
        "llm": dict(llm or {}),
        "tables": dict(tables or {}),
    }


def write_summary(run_dir: Path, s: Summary) -> Path:
    check(s, Path(run_dir) / FILE)
    path = Path(run_dir) / FILE
    path.write_text(json.dumps(s, indent=2) + "\n")
    return path


def check(s, where) -> Summary:
    """`s` if it has the Summary shape, else a SummaryError naming `where` and what is wrong."""

    def fail(what: str):
        raise SummaryError(
            f"{where}: not a lazymem summary ({what}); it was written by another version of lazymem or "
            "another program (see lazymem/eval/summary.py for the shape)"
        )

    if not isinstance(s, dict):
        fail(f"a JSON {type(s).__name__}, not an object")
    missing = [k for k in Summary.__annotations__ if k not in s]
    if missing:
        fail(f"no {', '.join(repr(k) for k in missing)}")
    if not isinstance(s["benchmarks"], dict) or not isinstance(s["tables"], dict):
        fail("'benchmarks' and 'tables' must be objects")
    for name, bench in s["benchmarks"].items():
        absent = [
            k for k in BenchmarkSummary.__annotations__ if not isinstance(bench, dict) or k not in bench
        ]
        if absent:
            fail(f"benchmark {name!r} has no {', '.join(repr(k) for k in absent)}")
        if not isinstance(bench["methods"], dict):
            fail(f"benchmark {name!r}: 'methods' must be an object of method summaries")
        if not all(isinstance(m, dict) for m in bench["methods"].values()):
            fail(f"benchmark {name!r}: every method's summary must be an object")
    unknown = sorted(set(s["tables"]) - set(TABLES))
    if unknown:
        fail(f"unknown tables {unknown}; known: {list(TABLES)}")
    return s


def read_summary(run_dir: Path) -> Summary:
    """The summary.json of a run directory; a missing, unreadable or foreign file is a SummaryError."""
    path = Path(run_dir) / FILE
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        raise SummaryError(
            f"{path}: no such file (the run did not finish, or is not a lazymem run)"
        ) from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise SummaryError(f"{path}: unreadable: {e}") from None
    return check(data, path)
