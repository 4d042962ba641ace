"""Tracking settings (lazymem/tracking/settings.py): the mode, and the W&B environment of trainer
subprocesses."""

from __future__ import annotations

import matplotlib
from omegaconf import OmegaConf

from lazymem import tracking
from lazymem.tracking.settings import resolve_mode, run_id

from helpers_runs import (
    tracking_cfg,
)

matplotlib.use("Agg")


def test_mode_from_the_environment_wins_over_the_config():
    assert resolve_mode({"mode": "online"}, {"WANDB_MODE": "offline"}) == "offline"
    assert resolve_mode({"mode": "online"}, {}) == "online"
    assert resolve_mode({"mode": None}, {}) == "offline"
    assert resolve_mode({}, {"WANDB_MODE": ""}) == "offline"


def test_subprocess_env_for_trainers(tmp_path):
    base = {"PATH": "/bin", "WANDB_MODE": "offline"}
    env = tracking.subprocess_env(
        tracking_cfg(mode="online", entity="team", group="g1"), tmp_path, "sft", base
    )
    assert env["PATH"] == "/bin" and env["WANDB_PROJECT"] == "lazymem" and env["WANDB_ENTITY"] == "team"
    assert env["WANDB_MODE"] == "offline"  # the environment's own mode wins
    assert env["WANDB_DIR"] == str(tmp_path.resolve()) and env["WANDB_NAME"] == "sft"
    assert env["WANDB_RUN_GROUP"] == "g1" and env["WANDB_TAGS"] == "t1"
    env = tracking.subprocess_env(tracking_cfg(mode="online"), tmp_path, "grpo", {"PATH": "/bin"})
    assert env["WANDB_MODE"] == "online" and "WANDB_ENTITY" not in env
    assert env["WANDB_RUN_GROUP"] == tmp_path.name  # the launching run's own: shown beside it
    off = tracking.subprocess_env(OmegaConf.create({"logger": {"backend": "none"}}), tmp_path, "sft", base)
    assert off == {"PATH": "/bin", "WANDB_MODE": "disabled"}
    assert tracking.subprocess_env(OmegaConf.create({}), tmp_path, "sft", {})["WANDB_MODE"] == "disabled"
    assert tracking.trainer_reports(tracking_cfg()) and not tracking.trainer_reports(OmegaConf.create({}))


def test_a_run_directory_keeps_its_wandb_run_id(tmp_path):
    """A resumed run (the same directory) goes on in the same W&B run, and so do its trainers; a new run in a
    reused path (a chain stage rerun after its directory was moved aside) gets a new id."""
    first = run_id(tmp_path / "stage")
    assert run_id(tmp_path / "stage") == first and run_id(tmp_path / "other") != first
    trainer = run_id(tmp_path / "stage", "stage-grpo")
    assert trainer.startswith(first) and trainer != first
    env = tracking.subprocess_env(tracking_cfg(), tmp_path / "stage", "stage-grpo", {})
    assert env["WANDB_RUN_ID"] == trainer and env["WANDB_RESUME"] == "allow"
    (tmp_path / "stage").rename(tmp_path / "superseded")
    assert run_id(tmp_path / "stage") != first
