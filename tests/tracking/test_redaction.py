"""Secrets kept out of what W&B gets (lazymem/tracking/redaction.py): the config and the command line."""

from __future__ import annotations

import json

import matplotlib

from lazymem.tracking.redaction import redacted_argv, wandb_config

from helpers_runs import (
    KEY_ENV,
    SECRET,
    tracking_cfg,
)

matplotlib.use("Agg")


def test_secrets_are_removed_from_the_config_and_the_command_line(monkeypatch):
    monkeypatch.setenv(KEY_ENV, SECRET)
    cfg = tracking_cfg()
    config = wandb_config(cfg)
    assert SECRET not in json.dumps(config)
    assert config["llm"]["judge"]["api_key"] == "<redacted>"
    assert config["llm"]["judge"]["header"] == "<redacted>"  # an interpolation of the key variable
    assert config["llm"]["judge"]["api_key_env"] == KEY_ENV and config["logger"]["project"] == "lazymem"
    argv = redacted_argv(
        ["task=x", f"+llm.judge.api_key={SECRET}", f"llm.x.url=http://h/?k={SECRET}", "llm.api_key_env=K"],
        [SECRET],
    )
    assert argv == [
        "task=x",
        "+llm.judge.api_key=<redacted>",
        "llm.x.url=http://h/?k=<redacted>",
        "llm.api_key_env=K",
    ]
