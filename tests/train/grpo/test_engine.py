"""The GRPO engine contract (lazymem/train/grpo/engine.py): the checks every engine shares, and how an engine
is found by its config or by the checkpoint choice it wrote."""

from __future__ import annotations

from collections import namedtuple

import pytest

from lazymem.train import checkpoint_disk
from lazymem.train.grpo.engine import (
    bundled_engines,
    check_disk,
    check_inputs,
    engine_packages,
    recorded_engine,
    reward_settings,
)
from lazymem.train.grpo.trl.engine import TrlEngine
from lazymem.train.grpo.verl.engine import VerlEngine

from helpers_train import grpo_cfg, reward_cfg


def test_inputs_need_the_rows_the_sft_checkpoint_and_whole_mini_batches(tmp_path):
    check_inputs(grpo_cfg(tmp_path))
    with pytest.raises(ValueError, match="rl_data_dir"):
        check_inputs(grpo_cfg(tmp_path, rl_data_dir=None))
    with pytest.raises(ValueError, match="SFT checkpoint"):
        check_inputs(grpo_cfg(tmp_path, model=None))
    with pytest.raises(ValueError, match="divide"):
        check_inputs(grpo_cfg(tmp_path, ppo_mini_batch_size=12))


def test_a_validation_file_without_rows_is_refused_before_training(tmp_path):
    """No validation row: no validation round, so neither the curriculum nor the checkpoint choice could
    work; build_rl writes such a file when its validation windows hold no gold message."""
    pa = pytest.importorskip("pyarrow")
    pq = pytest.importorskip("pyarrow.parquet")
    pq.write_table(pa.table({"data_source": pa.array([], pa.string())}), tmp_path / "val.parquet")
    with pytest.raises(ValueError, match="val.parquet holds no row.*balance_val=false"):
        check_inputs(grpo_cfg(tmp_path))
    pq.write_table(pa.table({"data_source": ["lazymem"]}), tmp_path / "val.parquet")
    check_inputs(grpo_cfg(tmp_path))


def test_disk_check_names_free_and_needed_space_and_the_directory(tmp_path, monkeypatch):
    usage = namedtuple("usage", "total used free")
    monkeypatch.setattr(checkpoint_disk.shutil, "disk_usage", lambda p: usage(0, 0, 30 * checkpoint_disk.GIB))
    target = tmp_path / "not" / "yet" / "there"  # measured on the nearest existing parent
    check_disk(target, 30)
    with pytest.raises(ValueError) as stop:
        check_disk(target, 100)
    assert str(stop.value).startswith(f"only 30.0 GiB free for checkpoints in {target}")
    assert "train.grpo.min_free_gib asks for 100 GiB" in str(stop.value)


def test_reward_settings_put_the_curriculum_state_beside_the_checkpoints(tmp_path):
    r = reward_cfg(tmp_path)
    r["curriculum"]["state_path"] = None
    s = reward_settings(r, tmp_path / "ckpt")
    assert s["curriculum_state"] == str((tmp_path / "ckpt" / "curriculum_state.json").resolve())
    assert (s["eta"], s["tau"], s["lam_phase1"], s["lam_phase2"]) == (0.915, 0.99, 0.0, 0.5)
    assert s["judge"]["max_error_rate"] == 0.05


def test_the_bundled_configs_name_the_engines_and_their_packages():
    """conf/train/grpo/NAME.yaml names an engine class; a stage's fingerprint reads its packages (all of them
    when the config names no engine)."""
    assert bundled_engines() == {"trl": TrlEngine, "verl": VerlEngine}
    assert engine_packages("lazymem.train.grpo.verl.engine.VerlEngine") == ("verl",)
    assert engine_packages(None) == ("trl", "verl")


def test_a_choice_names_the_engine_that_merges_it():
    assert isinstance(recorded_engine({"engine": "x", "engine_class": f"{__name__}.Own"}), Own)
    assert isinstance(recorded_engine({"engine": "verl"}), VerlEngine)  # written before the class was
    assert recorded_engine({"engine": "deepspeed"}) is None


class Own:
    """An engine of one's own, as a choice names it."""

    name = "own"
