"""A GRPO engine of one's own: one folder (toy_grpo/) and one config (conf/train/grpo/toy.yaml), copied
outside the checkout, with no edit of lazymem. task=train_grpo runs its trainer and chooses a checkpoint in
its layout, task=merge_rl has it write the model directory, and a chain stage's fingerprint reads its
packages."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import pytest
from hydra import compose, initialize_config_dir

from lazymem.conf import CONF_DIR
from lazymem.train.grpo.engine import engine_packages

from helpers import EXTENSION


@pytest.fixture
def outside(tmp_path):
    """tests/extension's modules and configs (not its tests) in a folder of their own."""
    folder = tmp_path / "ext"
    shutil.copytree(EXTENSION, folder, ignore=shutil.ignore_patterns("test_*.py", "__pycache__"))
    return folder


def lazymem_run(folder, run_dir, *overrides) -> subprocess.CompletedProcess:
    """`python -m lazymem.run` with the folder's modules importable and its configs on the search path."""
    env = {**os.environ, "PYTHONPATH": str(folder)}
    cmd = [sys.executable, "-m", "lazymem.run", *overrides, "logger=none"]
    cmd += [f"hydra.searchpath=[file://{folder / 'conf'}]", f"hydra.run.dir={run_dir}"]
    return subprocess.run(cmd, cwd=folder, env=env, capture_output=True, text=True)


def test_an_engine_of_your_own_trains_chooses_and_merges(outside, tmp_path):
    checkpoints, rows = tmp_path / "ckpt", tmp_path / "build_rl"
    rows.mkdir()
    trained = lazymem_run(
        outside,
        tmp_path / "grpo",
        "task=train_grpo",
        "+train/grpo@train.grpo=toy",
        f"train.grpo.rl_data_dir={rows}",
        f"train.grpo.model={tmp_path / 'sft'}",
        f"train.grpo.checkpoint_dir={checkpoints}",
        "train.grpo.min_free_gib=0",
    )
    assert trained.returncode == 0, trained.stderr[-3000:]
    assert "toy step 3: validation reward 0.67" in (tmp_path / "grpo" / "toy.log").read_text()
    choice = json.loads((checkpoints / "selected_checkpoint.json").read_text())
    assert (choice["engine"], choice["engine_class"], choice["step"]) == (
        "toy",
        "toy_grpo.engine.ToyEngine",
        2,
    )
    assert choice["path"] == str((checkpoints / "toy-step-2").resolve()) and choice["weights"] == "step 2"
    merged = lazymem_run(
        outside, tmp_path / "merge", "+experiment=merge_rl", f"merge.checkpoint_dir={checkpoints}"
    )
    assert merged.returncode == 0, merged.stderr[-3000:]
    assert (tmp_path / "merge" / "model" / "weights.txt").read_text() == "step 2\n"
    record = json.loads((tmp_path / "merge" / "merged.json").read_text())
    assert (record["engine"], record["step"], record["files"]) == ("toy", 2, ["weights.txt"])


@pytest.fixture
def importable(outside, monkeypatch):
    """The copied folder on sys.path; its toy_grpo modules forgotten after the test."""
    monkeypatch.syspath_prepend(str(outside))
    yield outside
    for name in [m for m in sys.modules if m.split(".")[0] == "toy_grpo"]:
        del sys.modules[name]


def test_its_packages_are_what_a_chain_stage_fingerprints(importable):
    outside = importable
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base=None):
        search = f"hydra.searchpath=[file://{outside / 'conf'}]"
        cfg = compose("config", overrides=["task=train_grpo", "+train/grpo@train.grpo=toy", search])
    assert engine_packages(cfg.train.grpo.engine._target_) == ("lazymem",)
