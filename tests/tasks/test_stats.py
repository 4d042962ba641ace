"""task=stats (the default task) through the CLI: stats.json, and the config and meta every run writes."""

import json

import yaml

from helpers import run_cli


def test_stats_run_writes_config_meta_and_outputs(tmp_path):
    out = run_cli("task=stats", "data.loader.per_type=1", f"hydra.run.dir={tmp_path}")
    assert out.returncode == 0, out.stderr
    stats = json.loads((tmp_path / "stats.json").read_text())
    assert stats["questions"] == 8 and sum(stats["by_type"].values()) == 8
    assert stats["tokens_per_history"]["mean"] > 0
    config = yaml.safe_load((tmp_path / "config.yaml").read_text())
    assert config["task"] == "stats" and config["data"]["loader"]["per_type"] == 1
    meta = json.loads((tmp_path / "meta.json").read_text())
    assert meta["status"] == "ok" and meta["end"] >= meta["start"]
    assert set(meta["git"]) == {"commit", "dirty"} and meta["versions"]["lazymem"]
    (dataset,) = meta["datasets"]
    assert dataset["sha256"] == stats["source"]["sha256"] and len(dataset["sha256"]) == 64
