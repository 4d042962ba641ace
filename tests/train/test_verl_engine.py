"""The VERL engine's launch (lazymem/train/verl_engine.py): its files, GPU needs and the Ray cluster."""

from __future__ import annotations

from lazymem.train.grpo_config import ray_overrides
from lazymem.train.verl_engine import VerlEngine

from helpers_train import grpo_cfg, reward_cfg


def test_launch_writes_the_overrides_and_counts_this_nodes_gpus(tmp_path):
    launch = VerlEngine().launch({**grpo_cfg(tmp_path), "reports": False}, reward_cfg(tmp_path), tmp_path)
    lines = (tmp_path / "overrides.txt").read_text().splitlines()
    assert launch.info["overrides"] == len(lines) and launch.command[1:3] == ["-m", "verl.trainer.main_ppo"]
    assert (launch.gpus, launch.plan_gpus, launch.rl_env, launch.validates) == (2, True, True, True)
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
