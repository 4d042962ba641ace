"""N22: the disk space training's checkpoints need, estimated from the model's parameter count
(lazymem/train/checkpoint_disk.py), against a fake model directory (tests/train/conftest.py) and a
monkeypatched shutil.disk_usage. Before, SFT asked for none; each GRPO engine's estimate is tested with its
engine (tests/train/grpo/*/test_engine.py)."""

from __future__ import annotations

import pytest

from lazymem.train import checkpoint_disk
from lazymem.train.checkpoint_disk import GIB, check_disk, sft_need
from lazymem.train.sft_config import train_yaml

from helpers_train import QWEN3_4B


def test_sft_checkpoints_per_epoch_under_deepspeed_take_16_bytes_a_parameter(tmp_path, qwen3_4b, free):
    """LLaMA-Factory 0.9.5 with DeepSpeed ZeRO-2 in bf16 saves per epoch the bf16 weights twice (safetensors
    and DeepSpeed's module states) and ZeRO's fp32 master weights and Adam moments: 16 bytes a parameter,
    60 GiB for Qwen3-4B; two epochs and the final model: 140 GiB with the margin."""
    base = {"model_name_or_path": str(qwen3_4b), "deepspeed": "ds_z2.json", "bf16": True}
    base |= {"save_strategy": "epoch", "num_train_epochs": 2.0, "load_best_model_at_end": True}
    need = sft_need(train_yaml(base, {}, tmp_path / "model"))
    assert need.gib == pytest.approx((2 * QWEN3_4B * 16 + QWEN3_4B * 2) / GIB * 1.1)
    assert round(need.gib) == 140
    alone = sft_need({**base, "deepspeed": None})  # one GPU: fp32 weights and optimizer.pt, 12 bytes
    assert alone.gib == pytest.approx((2 * QWEN3_4B * 12 + QWEN3_4B * 4) / GIB * 1.1)
    only = sft_need({**base, "save_only_model": True, "save_total_limit": 1, "num_train_epochs": 5})
    assert only.gib == pytest.approx((3 * QWEN3_4B * 2 + QWEN3_4B * 2) / GIB * 1.1)
    free(100)
    with pytest.raises(ValueError, match=r"about 140 GiB more .*train.sft.min_free_gib asks for 5 GiB"):
        check_disk(tmp_path / "model", 5, need, "train.sft", "use a larger disk")


def test_a_hub_id_is_read_from_the_local_hf_cache(tmp_path, qwen3_4b, monkeypatch):
    snapshot = tmp_path / "hub" / "models--Qwen--Qwen3-4B" / "snapshots" / ("ab" * 20)
    snapshot.mkdir(parents=True)
    (snapshot / "config.json").write_text((qwen3_4b / "config.json").read_text())
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    assert checkpoint_disk.local_model("Qwen/Qwen3-4B") == snapshot
    assert sft_need({"model_name_or_path": "Qwen/Qwen3-4B", "num_train_epochs": 1}).gib > 45
    assert checkpoint_disk.local_model("Qwen/Qwen3-32B") is None
