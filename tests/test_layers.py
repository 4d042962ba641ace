"""Imports flow one way: every package or top-level module of lazymem imports only from the layers before
its own (lazymem.LAYERS), so the package-level import graph has no cycle."""

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


def imported_units(source: str, path: Path) -> set[str]:
    """The lazymem units that `source`, a file at `path` in the package, imports (at any depth: imports
    inside functions count too)."""
    found = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level:  # relative: from the file's own package up
            base = path.relative_to(PACKAGE).parts[: -node.level]
            names = [".".join(("lazymem", *base, *([node.module] if node.module else [])))]
        elif isinstance(node, ast.ImportFrom) and node.module == "lazymem":
            names = [f"lazymem.{a.name}" for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            names = [node.module or ""]
        else:
            continue
        found |= {n.split(".")[1] for n in names if n.startswith("lazymem.")}
    return found


def sources() -> dict[Path, str]:
    """Every source file of the package -> its unit, the subpackages pyproject.toml maps from elsewhere in
    the checkout (conf/, experiments/) included."""
    files = {path: unit(path) for path in PACKAGE.rglob("*.py") if path != PACKAGE / "__init__.py"}
    for name in ("conf", "experiments"):
        folder = Path(importlib.import_module(f"lazymem.{name}").__file__).parent
        files |= {path: name for path in folder.rglob("*.py")}
    return files


def import_graph() -> dict[str, set[str]]:
    graph: dict[str, set[str]] = {}
    for path, u in sources().items():
        at = path if path.is_relative_to(PACKAGE) else PACKAGE / u / path.name  # as if it lay inside
        graph.setdefault(u, set()).update(imported_units(path.read_text(encoding="utf-8"), at) - {u})
    return graph


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
