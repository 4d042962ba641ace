"""scripts/compare_gates.py end to end on synthetic data: the gate, keep-all and the method's LLM memory
model (the LLM stand-in, tests/standin.py: the script's plumbing, not a model) on the same windows."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from helpers import ROOT
from standin import STANDIN_OVERRIDES, standin_env

pytestmark = pytest.mark.slow


def test_the_three_are_scored_on_the_same_stratified_sample(tmp_path):
    out = tmp_path / "compare.json"
    cmd = [
        sys.executable,
        "scripts/compare_gates.py",
        "--windows",
        "2",
        "--out",
        str(out),
        "--",
        "data.loader.per_type=1",
        "data.loader.abstention=0",
        *STANDIN_OVERRIDES,
    ]
    env = standin_env({**os.environ, "LAZYMEM_CACHE": str(tmp_path / "cache")})
    done = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(out.read_text())
    assert result["all_windows"]["gate"]["windows"] == result["windows"] > 2
    assert result["all_windows"]["keep_all"]["gold_kept"] == 1.0
    sample = result["sample"]
    assert set(sample) == {"gate", "keep_all", "llm (standin:roles, prompt-only)"}
    assert {s["windows"] for s in sample.values()} == {2}
    assert all(0.0 <= s["action_reward"] <= 1.0 for s in sample.values())
    assert sum(result["llm_outcomes"].values()) == 2  # one memory-model outcome per sampled window
    assert "| stratified sample | gate | 2 |" in done.stdout


def test_a_gate_trained_with_another_dense_retriever_is_refused(tmp_path):
    cmd = [sys.executable, "scripts/compare_gates.py", "--", "retrieval.retrievers.dense.template='{text}'"]
    env = {**os.environ, "LAZYMEM_CACHE": str(tmp_path / "cache")}
    done = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode != 0 and "train a gate under this retrieval" in done.stderr
