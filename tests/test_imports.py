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

from conftest import ROOT

MODULES = sorted(m.name for m in pkgutil.walk_packages(lazymem.__path__, "lazymem."))


def test_lazymem_is_imported_from_the_checkout_under_test():
    assert Path(lazymem.__file__).resolve().is_relative_to(ROOT.resolve())


@pytest.mark.parametrize("name", MODULES)
def test_every_module_imports(name):
    module = importlib.import_module(name)
    assert Path(module.__file__).resolve().is_relative_to(ROOT.resolve())
