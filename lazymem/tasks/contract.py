"""The task contract: what a task is to the code that runs it. Every task module of lazymem/tasks declares
one as `TASK`, and the registry (lazymem/tasks/__init__.py) maps `task=NAME` to it.

The runner (lazymem/runner.py) calls `run` and asks `counts_questions` and `resumes_itself`; a chain
(lazymem/chain) asks each stage's task for `problems`, `versions` and `training_files`. Generic code asks
these questions of the contract and never names a task.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Task:
    # the job: run(cfg, run) inside its run directory (lazymem.runner.Run); what it returns goes to the
    # tracker as the run's summary
    run: Callable[[Any, Any], dict | None]
    # problems(cfg): everything the job would stop on, checked in seconds without starting anything (a
    # chain checks every stage's before it starts); None: no check
    problems: Callable[[Any], list[str]] | None = None
    # its records.jsonl's question statuses decide the run's status (ok / partial / failed) and error budget
    counts_questions: bool = True
    # resume=true with a changed config is its own business (it decides what to rerun), not the runner's
    resumes_itself: bool = False
    # versions(cfg): {package: version} of the engine that computes its results (a chain stage's
    # fingerprint); None: lazymem itself
    versions: Callable[[Any], Mapping[str, str]] | None = None
    # glob patterns of the files in its run directory that hold training questions (`question_id`): a
    # chain's test-id guard reads them back
    training_files: tuple[str, ...] = ()
