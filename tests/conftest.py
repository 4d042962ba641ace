"""Shared fixtures. Real benchmark samples live in ../shared/data; tests that need them skip without it."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SHARED_DATA = Path(os.environ.get("LAZYMEM_SHARED_DATA", ROOT.parent / "shared" / "data"))


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


def run_cli(*overrides: str, env: dict | None = None, timeout: int = 300) -> subprocess.CompletedProcess:
    """`python -m lazymem.run OVERRIDES` from the repo root, as a user would run it."""
    return subprocess.run(
        [sys.executable, "-m", "lazymem.run", *overrides],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, **(env or {})},
    )
