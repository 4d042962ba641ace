"""The task registry (lazymem/tasks/__init__.py): every task module declares its Task (`TASK`) and is
listed; a name becomes its task without importing the others; `lazymem ls` reads each one's description
from its docstring."""

import importlib
import subprocess
import sys
from pathlib import Path

from lazymem import tasks
from lazymem.tasks.contract import Task

from helpers import ROOT

FOLDER = Path(tasks.__file__).parent


def test_every_task_module_declares_its_task_and_the_registry_lists_it():
    modules = sorted(p.stem for p in FOLDER.glob("*.py") if p.stem not in ("__init__", "contract"))
    assert sorted(tasks.NAMES) == modules
    for name in tasks.NAMES:
        module = importlib.import_module(f"lazymem.tasks.{name}")
        task = tasks.find(name)
        assert isinstance(task, Task) and task is module.TASK and task.run is module.run, name
        assert task.problems is getattr(module, "problems", None), name  # a module's check is its task's
    assert tasks.find("nope") is None and tasks.find("contract") is None


def test_a_description_is_the_docstring_without_its_label():
    assert (
        tasks.describe("stats")
        == "what is in the selected data (questions per type, history sizes, evidence)."
    )
    assert tasks.describe("doctor").startswith("can this machine run lazymem")


FIND = """
import sys
from lazymem import tasks
tasks.find("stats")
print(sorted(m for m in sys.modules if m.startswith("lazymem.tasks.")))
"""


def test_finding_a_task_imports_its_module_and_no_other_tasks():
    out = subprocess.run([sys.executable, "-c", FIND], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert out.stdout.splitlines()[-1] == "['lazymem.tasks.contract', 'lazymem.tasks.stats']", out.stderr[
        -2000:
    ]
