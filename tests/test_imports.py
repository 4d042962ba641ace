"""Every module of the package imports, and the lazymem that imports is the checkout under test.

scripts/setup_env.sh caches the dependencies' environment across checkouts and installs the project itself
into each checkout's .venv: a .venv that imported another tree would test the wrong code.
"""

from __future__ import annotations

import importlib
import pkgutil
from pathlib import Path

import pytest

import lazymem

from helpers import ROOT

MODULES = sorted(m.name for m in pkgutil.walk_packages(lazymem.__path__, "lazymem."))


def test_lazymem_is_imported_from_the_checkout_under_test():
    assert Path(lazymem.__file__).resolve().is_relative_to(ROOT.resolve())


@pytest.mark.parametrize("name", MODULES)
def test_every_module_imports(name):
    module = importlib.import_module(name)
    assert Path(module.__file__).resolve().is_relative_to(ROOT.resolve())


def test_the_wheels_package_list_is_the_source_tree():
    """pyproject.toml lists the packages (conf/ and experiments/ are mapped in from the top of the
    checkout), so a new package must be listed or it would be missing from `pip install .`."""
    import tomllib

    setuptools = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    on_disk = {"lazymem"} | {
        "lazymem." + ".".join(p.parent.relative_to(ROOT / "lazymem").parts)
        for p in (ROOT / "lazymem").rglob("__init__.py")
        if p.parent != ROOT / "lazymem"
    }
    mapped = {
        name for name, folder in setuptools["package-dir"].items() if (ROOT / folder / "__init__.py").exists()
    }
    assert set(setuptools["packages"]) == on_disk | mapped
    assert mapped == {"lazymem.conf", "lazymem.experiments"}


def test_the_config_tree_and_the_papers_numbers_come_from_the_top_of_the_checkout():
    from lazymem.conf import CONF_DIR
    from lazymem.experiments import EXPERIMENTS_DIR

    assert (ROOT / "conf").resolve() == CONF_DIR and (CONF_DIR / "config.yaml").is_file()
    assert (ROOT / "experiments").resolve() == EXPERIMENTS_DIR and (
        EXPERIMENTS_DIR / "main_table.json"
    ).is_file()
