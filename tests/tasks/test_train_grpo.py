"""task=train_grpo through the CLI up to VERL's launch: the dry run's overrides and command, and the stops
before it (no SFT checkpoint, too few GPUs, no RL environment)."""

from __future__ import annotations

from helpers import run_cli


def test_train_grpo_without_an_sft_checkpoint_stops_and_says_how_to_pass_it(tmp_path):
    proc = run_cli(
        "+experiment=train_grpo",
        f"train.grpo.rl_data_dir={tmp_path}",
        "train.grpo.dry_run=true",
        f"hydra.run.dir={tmp_path / 'run'}",
        env={"LAZYMEM_SFT_MODEL": None},
    )
    assert proc.returncode != 0
    assert "train.grpo.model=<the `path` in a train_sft run's checkpoint.json>" in proc.stderr
    assert not (tmp_path / "run" / "command.sh").exists()


def test_train_grpo_dry_run(tmp_path):
    proc = run_cli(
        "+experiment=train_grpo",
        f"train.grpo.rl_data_dir={tmp_path}",
        "train.grpo.model=/models/sft",
        "train.grpo.dry_run=true",
        "train.grpo.python=/envs/gpu-rl/bin/python",  # the GPU nodes' RL environment runs VERL
        "logger=wandb",
        "logger.project=memproj",  # VERL reports to the launching run's W&B project
        f"hydra.run.dir={tmp_path / 'run'}",
        env={"WANDB_MODE": "offline"},
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    lines = (tmp_path / "run" / "overrides.txt").read_text().splitlines()
    assert "trainer.project_name=memproj" in lines
    (loggers,) = [x for x in lines if x.startswith("trainer.logger=")]
    assert "console" in loggers and "wandb" in loggers  # logger=wandb: VERL logs its steps there too
    assert "algorithm.adv_estimator=grpo" in lines and "trainer.n_gpus_per_node=2" in lines
    (judge,) = [x for x in lines if x.startswith("+reward.custom_reward_function.reward_kwargs.judge.llm=")]
    assert "backend:endpoint" in judge and "thinking_budget:512" in judge  # llm.roles.reward_judge, resolved
    assert "/envs/gpu-rl/bin/python -m verl.trainer.main_ppo" in (tmp_path / "run" / "command.sh").read_text()


def test_train_grpo_without_the_gpus_stops_before_starting_verl(tmp_path):
    proc = run_cli(
        "+experiment=train_grpo",
        f"train.grpo.rl_data_dir={tmp_path}",
        "train.grpo.model=/models/sft",
        "train.grpo.n_gpus_per_node=1024",  # more than any machine running this test has
        f"hydra.run.dir={tmp_path / 'run'}",
    )
    assert proc.returncode != 0
    assert "train_grpo needs 1024 GPUs on this node (train.grpo.n_gpus_per_node), found " in proc.stderr
    assert not (tmp_path / "run" / "verl.log").exists()
    assert (tmp_path / "run" / "command.sh").exists()  # the command is still there to inspect


def test_train_grpo_without_its_environment_says_how_to_build_it(tmp_path):
    proc = run_cli(
        "+experiment=train_grpo",
        f"train.grpo.rl_data_dir={tmp_path}",
        "train.grpo.model=/models/sft",
        f"train.grpo.python={tmp_path / 'no-env' / 'bin' / 'python'}",
        f"hydra.run.dir={tmp_path / 'run'}",
    )
    assert proc.returncode != 0 and "Traceback" not in proc.stderr
    assert "does not exist: build the RL environment with scripts/setup_gpu_env.sh" in proc.stderr
    assert not (tmp_path / "run" / "verl.log").exists()
