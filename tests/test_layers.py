"""Imports flow one way: every package or top-level module of lazymem imports only from the layers before
its own (lazymem.LAYERS), so the package-level import graph has no cycle; and inside a package no two
modules import each other, directly or around a circle, so the module-level graph has none either."""

from __future__ import annotations

import ast
import importlib
from pathlib import Path

import lazymem

PACKAGE = Path(lazymem.__file__).parent


def unit(path: Path) -> str:
    """lazymem/<package>/... -> package; lazymem/<module>.py -> module."""
    parts = path.relative_to(PACKAGE).parts
    return parts[0] if len(parts) > 1 else parts[0].removesuffix(".py")


def imported_names(source: str, path: Path) -> set[str]:
    """The dotted lazymem names that `source`, a file at `path` in the package, imports (at any depth:
    imports inside functions count too). `from M import n` gives `M.n`, which names a module or something
    defined in M."""
    found = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:  # relative: from the file's own package up
                base = ".".join(("lazymem", *path.relative_to(PACKAGE).parts[: -node.level]))
                module = f"{base}.{node.module}" if node.module else base
            else:
                module = node.module or ""
            names = [f"{module}.{a.name}" for a in node.names]
        else:
            continue
        found |= {n for n in names if n.startswith("lazymem.")}
    return found


def imported_units(source: str, path: Path) -> set[str]:
    """The lazymem units that `source`, a file at `path` in the package, imports."""
    return {n.split(".")[1] for n in imported_names(source, path)}


def sources() -> dict[Path, str]:
    """Every source file of the package -> its unit, the subpackages pyproject.toml maps from elsewhere in
    the checkout (conf/, experiments/) included."""
    files = {path: unit(path) for path in PACKAGE.rglob("*.py") if path != PACKAGE / "__init__.py"}
    for name in ("conf", "experiments"):
        folder = Path(importlib.import_module(f"lazymem.{name}").__file__).parent
        files |= {path: name for path in folder.rglob("*.py")}
    return files


def inside(path: Path, u: str) -> Path:
    """Where a source file lies, as if conf/ and experiments/ lay inside the package."""
    return path if path.is_relative_to(PACKAGE) else PACKAGE / u / path.name


def import_graph() -> dict[str, set[str]]:
    graph: dict[str, set[str]] = {}
    for path, u in sources().items():
        graph.setdefault(u, set()).update(
            imported_units(path.read_text(encoding="utf-8"), inside(path, u)) - {u}
        )
    return graph


def module_of(path: Path) -> str:
    """lazymem/a/b.py -> lazymem.a.b; lazymem/a/__init__.py -> lazymem.a."""
    parts = path.relative_to(PACKAGE).with_suffix("").parts
    return ".".join(("lazymem", *(parts[:-1] if parts[-1] == "__init__" else parts)))


def resolve(name: str, modules: set[str]) -> str | None:
    """The module `name` lies in: itself, or the longest module its dotted prefix names."""
    while name and name not in modules:
        name = name.rpartition(".")[0]
    return name or None


def module_graph(files: dict[str, tuple[Path, str]]) -> dict[str, set[str]]:
    """Module -> the modules it imports, from module -> (its path in the package, its source). A package's
    __init__ importing its own modules is left out: importing them runs it first, which is no circle."""
    modules = set(files)
    graph = {}
    for name, (path, source) in files.items():
        found = {resolve(n, modules) for n in imported_names(source, path)} - {None, name}
        is_package = path.name == "__init__.py"
        graph[name] = {m for m in found if not (is_package and m.startswith(name + "."))}
    return graph


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The import circles of `graph`: each strongly connected set of two or more modules, sorted
    (Tarjan's algorithm, iterative: the package is deep enough to matter for recursion)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found = []
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph.get(root, ()))))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is None:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    group = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        group.append(member)
                        if member == node:
                            break
                    if len(group) > 1:
                        found.append(sorted(group))
            elif child not in index:
                index[child] = low[child] = len(index)
                stack.append(child)
                on_stack.add(child)
                work.append((child, iter(sorted(graph.get(child, ())))))
            elif child in on_stack:
                low[node] = min(low[node], index[child])
    return sorted(found)


def test_every_unit_has_one_layer_and_imports_only_earlier_layers():
    layer = {u: i for i, units in enumerate(lazymem.LAYERS) for u in units}
    assert sum(len(units) for units in lazymem.LAYERS) == len(layer), "a unit is listed twice"
    graph = import_graph()
    assert sorted(graph) == sorted(layer), "every package and top-level module has a layer"
    wrong = sorted(f"{u} -> {v}" for u, deps in graph.items() for v in deps if layer[v] >= layer[u])
    assert wrong == [], f"imports of the same or a later layer: {wrong}"


def test_the_graph_sees_every_form_of_import():
    source = (
        "import lazymem.llm.client\n"
        "from lazymem import interrupt\n"
        "from lazymem.construct.accuracy import ETA\n"
        "from . import sibling\n"
        "from ..data import schema\n"
        "def late():\n"
        "    from lazymem.train import reward\n"
    )
    at = PACKAGE / "eval" / "probe.py"
    assert imported_units(source, at) == {"llm", "interrupt", "construct", "eval", "data", "train"}


def test_no_two_modules_import_each_other_around_a_circle():
    files = {}
    for path, u in sources().items():
        at = inside(path, u)
        files[module_of(at)] = (at, path.read_text(encoding="utf-8"))
    found = circles(module_graph(files))
    assert found == [], f"import circles between modules: {found}"


def test_a_circle_between_two_modules_of_a_package_is_found():
    """The check above can fail: a store module that imports the module that opens it, which imports it
    back from inside a function, is a circle; so is one around three modules."""
    files = {
        "lazymem.agent": (PACKAGE / "agent" / "__init__.py", "from lazymem.agent import store\n"),
        "lazymem.agent.store": (
            PACKAGE / "agent" / "store.py",
            "def open_store():\n    from lazymem.agent.sqlite_store import SQLiteStore\n",
        ),
        "lazymem.agent.sqlite_store": (PACKAGE / "agent" / "sqlite_store.py", "from .store import Store\n"),
        "lazymem.agent.memory": (PACKAGE / "agent" / "memory.py", "from lazymem.agent import store\n"),
        "lazymem.llm.a": (PACKAGE / "llm" / "a.py", "import lazymem.llm.b\n"),
        "lazymem.llm.b": (PACKAGE / "llm" / "b.py", "from lazymem.llm import c\n"),
        "lazymem.llm.c": (PACKAGE / "llm" / "c.py", "from lazymem.llm.a import thing\n"),
    }
    assert circles(module_graph(files)) == [
        ["lazymem.agent.sqlite_store", "lazymem.agent.store"],
        ["lazymem.llm.a", "lazymem.llm.b", "lazymem.llm.c"],
    ]
    del files["lazymem.agent.sqlite_store"]  # the stores' shared contract moved out of store.py: no circle
    files["lazymem.llm.c"] = (PACKAGE / "llm" / "c.py", "import json\n")
    assert circles(module_graph(files)) == []
