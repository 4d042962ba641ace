"""task=tiny_model through the CLI: chain_cpu's base model, written into the run directory."""

import json

from helpers import run_cli


def test_tiny_model_task_writes_a_loadable_model(tmp_path):
    r = run_cli(
        "+experiment=tiny_model_cpu", "tiny_model.hidden=64", "logger=none", f"hydra.run.dir={tmp_path}/run"
    )
    assert r.returncode == 0, r.stderr
    config = json.loads((tmp_path / "run" / "model" / "config.json").read_text())
    assert config["hidden_size"] == 64 and config["model_type"] == "qwen3"
    assert (tmp_path / "run" / "model" / "tokenizer.json").exists()
