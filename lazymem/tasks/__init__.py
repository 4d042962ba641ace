"""Launchable jobs, one module each. This is the task registry: `task=NAME` runs the Task that
lazymem/tasks/NAME.py declares as `TASK` (its contract: lazymem/tasks/contract.py), and this is the one
place where a task's name becomes its code. A new task: its module, with `TASK = Task(run, ...)` at the
end, and its name below; `lazymem ls` lists it.
"""

from __future__ import annotations

import ast
import importlib
import re
from pathlib import Path

from lazymem.tasks.contract import Task

NAMES = (
    "build_rl",
    "build_sft",
    "cache",
    "chain",
    "construction_eval",
    "coverage",
    "doctor",
    "evaluate",
    "gguf_export",
    "gguf_model",
    "gpu_check",
    "main_table",
    "merge_rl",
    "perturbation",
    "report",
    "reward_diagnostics",
    "reward_rollouts",
    "split",
    "stats",
    "tiny_model",
    "train_gate",
    "train_grpo",
    "train_reranker",
    "train_sft",
)


def find(name: str) -> Task | None:
    """The task called `name`, or None. Its module is imported only now: together the tasks import torch,
    transformers, Ray and more, seconds that a run of one task need not pay."""
    if name not in NAMES:
        return None
    return importlib.import_module(f"{__name__}.{name}").TASK


def describe(name: str) -> str:
    """What the task does: its module docstring's first paragraph without the `task=NAME: ` label, read
    from the source without importing the module."""
    source = (Path(__file__).parent / f"{name}.py").read_text(encoding="utf-8")
    paragraph = (ast.get_docstring(ast.parse(source)) or "").split("\n\n")[0]
    return re.sub(rf"^task={name}\b[^:]*:\s*", "", " ".join(paragraph.split()))
