"""The VERL engine (lazymem/train/grpo/verl/engine.py): its launch's files, GPU needs and the Ray cluster,
its checkpoint layout, and N22's disk space for its checkpoints (fixtures: tests/train/conftest.py). Before,
GRPO asked for a flat 100 GiB (train.grpo.min_free_gib), a fifth of VERL's five kept checkpoints of a 4B
model."""

from __future__ import annotations

import pytest

from lazymem.train.checkpoint_disk import GIB, check_disk
from lazymem.train.grpo.checkpoints import append_validation, select_rl_checkpoint
from lazymem.train.grpo.verl.engine import VerlEngine, verl_need
from lazymem.train.grpo.verl.overrides import ray_overrides

from helpers_train import QWEN3_4B, grpo_cfg, reward_cfg


def test_launch_writes_the_overrides_and_counts_this_nodes_gpus(tmp_path):
    launch = VerlEngine().launch({**grpo_cfg(tmp_path), "reports": False}, reward_cfg(tmp_path), tmp_path)
    lines = (tmp_path / "overrides.txt").read_text().splitlines()
    assert launch.info["overrides"] == len(lines) and launch.command[1:3] == ["-m", "verl.trainer.main_ppo"]
    assert (launch.gpus, launch.plan_gpus, launch.validates) == (2, True, True)
    assert VerlEngine().env_modules(None) == ("verl", "flash_attn")
    assert "trainer.logger=[console]" in lines  # an untracked run: no W&B
    # a Ray of VERL's own (workers in its Python), never a cluster found through RAY_ADDRESS or `ray start`,
    # on its 2 GPUs only: the GRPO stage of a chain also sees the reward judge's GPU, after them
    assert [x for x in lines if "ray_init.address" in x or "ray_init.num_gpus" in x] == [
        "+ray_kwargs.ray_init.address=local",
        "+ray_kwargs.ray_init.num_gpus=2",
    ]
    tracked = VerlEngine().launch({**grpo_cfg(tmp_path), "reports": True}, None, tmp_path)
    assert "trainer.logger=[console,wandb]" in tmp_path.joinpath("overrides.txt").read_text().splitlines()
    assert tracked.info["overrides"] < launch.info["overrides"]  # no reward kwargs without train.reward


def test_a_ray_address_joins_that_cluster_and_skips_the_local_gpu_check(tmp_path):
    g = {**grpo_cfg(tmp_path, ray_address="10.0.0.1:6379"), "reports": False}
    launch = VerlEngine().launch(g, None, tmp_path)
    lines = (tmp_path / "overrides.txt").read_text().splitlines()
    assert lines[-2:] == ray_overrides("10.0.0.1:6379", 2)
    assert '+ray_kwargs.ray_init.address="10.0.0.1:6379"' in lines
    assert "ray_kwargs.ray_init.num_cpus=null" in lines  # ray.init refuses num_cpus with an address
    assert (launch.gpus, launch.plan_gpus) == (0, False)  # the cluster's scheduler places VERL


def test_its_checkpoints_are_global_step_dirs_chosen_with_nothing_more_to_say(tmp_path):
    append_validation(tmp_path, {"step": 30, "lam": 0.0, "reward": 0.5})
    (tmp_path / "global_step_30").mkdir()
    choice = select_rl_checkpoint(tmp_path, VerlEngine())
    assert choice["path"] == str((tmp_path / "global_step_30").resolve())
    assert (choice["engine"], choice["engine_class"]) == ("verl", "lazymem.train.grpo.verl.engine.VerlEngine")
    assert "adapter" not in choice and VerlEngine.packages == ("verl",)


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
