"""The tests' layout: each module of lazymem/ has its test file where a newcomer looks for it.

lazymem/<pkg>/<mod>.py is tested in tests/<pkg>/test_<mod>.py, a top-level lazymem/<mod>.py in
tests/test_<mod>.py, and a package's __init__.py that defines functions or classes in
tests/<pkg>/test_<pkg>.py (lazymem/__init__.py: tests/test_lazymem.py). Runs through the CLI and real parts
live in tests/e2e/, the outside-the-package examples in tests/extension/, the config tree's tests in
tests/conf/ (the configs the tests add in tests/fixtures/), the scripts' in tests/scripts/, and repo-wide
checks (this one, the layers, the imports, the config comments, the package) at the top.

A module without tests of its own is listed in UNTESTED with the reason; the list only shrinks: a module
on it that gains a test file fails until its entry is removed.
"""

from __future__ import annotations

import ast
from pathlib import Path

from helpers import ROOT

# module (relative to the checkout) -> why it has no test file of its own yet
UNTESTED: dict[str, str] = {}
# tests/ folders that hold no module's tests, though conf is named like a package (lazymem.conf, only YAML)
EXEMPT = {"conf", "e2e", "extension", "fixtures"}


def defines_something(path: Path) -> bool:
    tree = ast.parse(path.read_text())
    return any(isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef) for n in tree.body)


def expected_file(module: Path, package: Path) -> Path:
    """The test file of `module` (a path under `package`), relative to tests/."""
    rel = module.relative_to(package)
    if rel.name == "__init__.py":
        name = rel.parent.name or package.name  # lazymem/__init__.py: test_lazymem.py
        return rel.parent / f"test_{name}.py"
    return rel.parent / f"test_{rel.stem}.py"


def modules(package: Path) -> list[Path]:
    """Every module of `package` that needs tests: all but the __init__.py files that define nothing."""
    found = sorted(package.rglob("*.py"))
    return [m for m in found if m.name != "__init__.py" or defines_something(m)]


def problems(package: Path, tests: Path, untested: dict[str, str]) -> list[str]:
    root = package.parent
    expected = {expected_file(m, package): m for m in modules(package)}
    out = []
    for test, module in expected.items():
        key = str(module.relative_to(root))
        if key in untested:
            if (tests / test).exists():
                out.append(f"{key} is listed in UNTESTED but has tests/{test}: remove it from UNTESTED")
        elif not (tests / test).exists():
            out.append(f"tests/{test} is missing: the tests of {key}")
    known = {str(m.relative_to(root)) for m in expected.values()}
    for key in sorted(untested.keys() - known):
        out.append(f"UNTESTED lists {key}, which is not a module that needs tests")
    packages = {p.parent.relative_to(package) for p in package.rglob("__init__.py") if p.parent != package}
    for test in sorted(tests.rglob("test_*.py")):
        rel = test.relative_to(tests)
        if rel.parent == Path(".") or rel.parts[0] in EXEMPT or rel.parent not in packages:
            continue
        if rel not in expected:
            out.append(f"tests/{rel} tests no module: lazymem/{rel.parent}/{rel.name[5:]} does not exist")
    return out


def test_every_module_has_its_test_file_and_every_test_file_its_module():
    found = problems(ROOT / "lazymem", ROOT / "tests", UNTESTED)
    assert not found, "the tests' layout (tests/test_layout.py):\n" + "\n".join(found)


def test_the_check_finds_missing_orphaned_and_stale_files(tmp_path):
    package, tests = tmp_path / "lazymem", tmp_path / "tests"
    for path, text in {
        "__init__.py": "def f(): pass\n",
        "numeric.py": "",
        "agent/__init__.py": "",
        "agent/store.py": "",
        "agent/memory.py": "",
        "data/__init__.py": "class Dataset: pass\n",
        "data/io.py": "",
    }.items():
        (package / path).parent.mkdir(parents=True, exist_ok=True)
        (package / path).write_text(text)
    for path in ("test_lazymem.py", "agent/test_store.py", "agent/test_old.py", "data/test_io.py"):
        (tests / path).parent.mkdir(parents=True, exist_ok=True)
        (tests / path).write_text("")
    (tests / "e2e").mkdir()
    (tests / "e2e" / "test_rehearsal.py").write_text("")
    untested = {"lazymem/data/io.py": "why", "lazymem/gone.py": "why"}
    assert problems(package, tests, untested) == [
        "tests/agent/test_memory.py is missing: the tests of lazymem/agent/memory.py",
        "tests/data/test_data.py is missing: the tests of lazymem/data/__init__.py",
        "lazymem/data/io.py is listed in UNTESTED but has tests/data/test_io.py: remove it from UNTESTED",
        "tests/test_numeric.py is missing: the tests of lazymem/numeric.py",
        "UNTESTED lists lazymem/gone.py, which is not a module that needs tests",
        "tests/agent/test_old.py tests no module: lazymem/agent/old.py does not exist",
    ]
