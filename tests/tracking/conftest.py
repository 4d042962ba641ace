"""An evaluate-like run directory for the tracking tests (tests/helpers_runs.py writes it)."""

from __future__ import annotations

from pathlib import Path

import pytest

from helpers_runs import write_tracked_run


@pytest.fixture
def run_dir(tmp_path) -> Path:
    return write_tracked_run(tmp_path / "12-00-00_evaluate_abc")
