"""The TRL engine (lazymem/train/grpo/trl/engine.py): its launch, its checkpoint layout (an adapter says so in
the choice) and the disk space of its checkpoints (fixtures: tests/train/conftest.py)."""

from __future__ import annotations

import json

import pytest

from lazymem.train.checkpoint_disk import GIB
from lazymem.train.grpo.checkpoints import append_validation, select_rl_checkpoint
from lazymem.train.grpo.trl.engine import CONFIG, TrlEngine, trl_need

from helpers_train import GRPO_TRL, QWEN3_4B, grpo_cfg, reward_cfg


def test_launch_writes_the_scripts_config_and_needs_the_reward(tmp_path):
    g = {**grpo_cfg(tmp_path, engine=GRPO_TRL, checkpoint_dir=str(tmp_path / "ck")), "reports": True}
    launch = TrlEngine().launch(g, reward_cfg(tmp_path), tmp_path)
    config = json.loads((tmp_path / CONFIG).read_text())
    assert launch.command[-3:] == ["-m", "lazymem.train.grpo.trl.run", str(tmp_path / CONFIG)]
    assert (launch.gpus, launch.validates) == (1, True)
    # N15: TRL's vLLM rollouts need vllm in its Python; transformers' generate needs nothing beyond lazymem
    engine = TrlEngine()
    assert engine.env_modules({**g, "use_vllm": True}) == ("vllm",) == engine.env_modules(None)
    assert engine.env_modules({**g, "use_vllm": False}) == ()
    assert config["train_file"] == str(tmp_path.resolve() / "train.parquet")
    assert config["args"]["report_to"] == ["wandb"] and config["args"]["output_dir"] == str(tmp_path / "ck")
    assert config["reward"]["tau"] == 0.99
    with pytest.raises(ValueError, match="train.reward"):
        TrlEngine().launch(g, None, tmp_path)


def test_its_checkpoints_are_checkpoint_dirs_and_the_choice_says_whether_one_is_an_adapter(tmp_path):
    append_validation(tmp_path, {"step": 2, "lam": 0.0, "reward": 0.5})
    (tmp_path / "checkpoint-2").mkdir()
    choice = select_rl_checkpoint(tmp_path, TrlEngine())
    assert (choice["engine"], choice["path"], choice["adapter"]) == (
        "trl",
        str(tmp_path / "checkpoint-2"),
        False,
    )
    (tmp_path / "checkpoint-2" / "adapter_config.json").write_text("{}")  # peft's, beside the adapter
    assert select_rl_checkpoint(tmp_path, TrlEngine())["adapter"] is True
    assert TrlEngine.packages == ("trl",)


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
