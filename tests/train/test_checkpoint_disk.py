"""N22: the disk space training's checkpoints need, estimated from the model's parameter count
(lazymem/train/checkpoint_disk.py), against a fake model directory (Qwen3-4B's real config.json, no weights)
and a monkeypatched shutil.disk_usage. Before, GRPO asked for a flat 100 GiB (train.grpo.min_free_gib), a
fifth of VERL's five kept checkpoints of a 4B model, and SFT for none."""

from __future__ import annotations

import json
from collections import namedtuple
from pathlib import Path

import pytest

from lazymem.train import checkpoint_disk
from lazymem.train.checkpoint_disk import GIB, check_disk, sft_need, trl_need, verl_need
from lazymem.train.sft_config import train_yaml
from lazymem.train.trl_engine import TrlEngine
from lazymem.train.verl_engine import VerlEngine

from helpers_llm import MODEL_CONFIGS
from helpers_train import GRPO_TRL, grpo_cfg, reward_cfg

QWEN3_4B = 4_022_272_000  # parameters Qwen3-4B's config.json makes (model_memory.param_count)


@pytest.fixture
def qwen3_4b(tmp_path) -> Path:
    model = tmp_path / "sft-model"
    model.mkdir()
    (model / "config.json").write_text(json.dumps(MODEL_CONFIGS["Qwen3-4B"]))
    return model


@pytest.fixture
def free(monkeypatch):
    """Set the free space shutil.disk_usage reports, in GiB."""
    usage = namedtuple("usage", "total used free")

    def set_free(gib: float) -> None:
        monkeypatch.setattr(checkpoint_disk.shutil, "disk_usage", lambda p: usage(0, 0, gib * GIB))

    return set_free


def test_verls_five_checkpoints_of_a_4b_model_need_about_247_gib(tmp_path, qwen3_4b, free):
    """VERL 0.9.1 saves the fp32 actor's shards and its AdamW moments (12 bytes a parameter: 45 GiB for
    Qwen3-4B) and keeps max_actor_ckpt_to_keep = 5 of them: 225 GiB, 247 with the 10% margin. 150 GiB free
    passed the old floor of 100 and now stops the run, naming the estimate and the free space."""
    g = grpo_cfg(tmp_path, model=str(qwen3_4b), checkpoint_dir=str(tmp_path / "ckpt"))
    need = verl_need(g)
    assert need.gib == pytest.approx(5 * QWEN3_4B * 12 / GIB * 1.1)
    assert round(need.gib) == 247
    assert VerlEngine().launch(g, reward_cfg(tmp_path), tmp_path).disk == need  # the engine hands it over
    free(150)
    with pytest.raises(ValueError) as stop:
        check_disk(g["checkpoint_dir"], g["min_free_gib"], need)
    assert str(stop.value) == (
        f"only 150.0 GiB free for checkpoints in {tmp_path / 'ckpt'} (the kept checkpoints need about "
        "247 GiB more (5 checkpoints x 45.0 GiB (sft-model's 4.02B parameters x 12 bytes: extra, model, "
        "optimizer) + 10%); train.grpo.min_free_gib asks for 100 GiB): free space there, or point "
        "train.grpo.checkpoint_dir at a larger disk"
    )
    free(250)
    check_disk(g["checkpoint_dir"], g["min_free_gib"], need)
    # a HF copy in every checkpoint adds bf16 weights; keeping one still holds two while the next is saved
    more = verl_need({**g, "save_contents": ["model", "optimizer", "extra", "hf_model"]})
    assert more.gib == pytest.approx(5 * QWEN3_4B * 14 / GIB * 1.1)
    assert verl_need({**g, "max_actor_ckpt_to_keep": 1}).gib == pytest.approx(2 * QWEN3_4B * 12 / GIB * 1.1)


def test_min_free_gib_stays_the_floor_and_alone_decides_without_the_models_size(tmp_path, qwen3_4b, free):
    free(150)
    g = grpo_cfg(tmp_path, model=str(tmp_path / "no-such-model"), checkpoint_dir=str(tmp_path / "ckpt"))
    assert verl_need(g) is None
    check_disk(g["checkpoint_dir"], 100, verl_need(g))
    small = grpo_cfg(tmp_path, model=str(qwen3_4b), max_actor_ckpt_to_keep=2)
    with pytest.raises(ValueError, match=r"about 99 GiB more .*; train.grpo.min_free_gib asks for 200 GiB"):
        check_disk(tmp_path / "ckpt", 200, verl_need(small))


def test_checkpoints_already_there_count_among_the_kept_ones(tmp_path, qwen3_4b, free):
    """A resumed run: two checkpoints (90 GiB, sparse files here) are already in checkpoint_dir and are among
    the five kept, so 157 GiB more are needed."""
    g = grpo_cfg(tmp_path, model=str(qwen3_4b), checkpoint_dir=str(tmp_path / "ckpt"))
    for step in (30, 60):
        shard = tmp_path / "ckpt" / f"global_step_{step}" / "actor" / "model_world_size_2_rank_0.pt"
        shard.parent.mkdir(parents=True)
        with shard.open("wb") as f:
            f.truncate(int(QWEN3_4B * 12))
    free(160)
    check_disk(g["checkpoint_dir"], g["min_free_gib"], verl_need(g))
    free(150)
    with pytest.raises(ValueError, match="about 157 GiB more .*; 90 GiB of them are there already"):
        check_disk(g["checkpoint_dir"], g["min_free_gib"], verl_need(g))


def test_trl_keeps_save_total_limit_plus_one_and_a_lora_run_saves_its_adapters(tmp_path, qwen3_4b):
    """TRL 1.16's Trainer rotates after saving: 6 checkpoints on disk with save_total_limit 5. A full
    fine-tune's are fp32 weights + AdamW (12 bytes a parameter); the one-GPU recipe's rank-64 LoRA adapters
    (132M parameters, fp32) with their optimiser state take 1.5 GiB each."""
    g = grpo_cfg(tmp_path, GRPO_TRL, model=str(qwen3_4b))
    lora = trl_need(g)
    assert lora.gib == pytest.approx(6 * 132_120_576 * 12 / GIB * 1.1)
    assert round(lora.gib, 1) == 9.7 and "rank-64 adapters on sft-model" in lora.why
    assert TrlEngine().launch(g, reward_cfg(tmp_path), tmp_path).disk == lora
    full = trl_need({**g, "lora": {**g["lora"], "enabled": False}})
    assert full.gib == pytest.approx(6 * QWEN3_4B * 12 / GIB * 1.1)


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
