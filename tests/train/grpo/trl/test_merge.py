"""TRL's checkpoint as a model directory: the model's files copied, the trainer's state left behind, and a
checkpoint without weights refused by name (task=merge_rl runs it: tests/tasks/test_merge_rl.py)."""

from __future__ import annotations

import pytest

from lazymem.train.grpo.trl.merge import TRAINING_STATE, merge


def test_the_model_files_are_copied_without_the_training_state(tmp_path):
    ckpt = tmp_path / "checkpoint-4"
    ckpt.mkdir()
    model_files = ["model.safetensors", "config.json", "tokenizer.json", "chat_template.jinja"]
    for name in (*model_files, *TRAINING_STATE):
        (ckpt / name).write_text(name)
    record = merge({"path": str(ckpt)}, tmp_path / "model")
    assert record["files"] == model_files
    assert sorted(p.name for p in (tmp_path / "model").iterdir()) == sorted(record["files"])


def test_a_checkpoint_without_weights_is_refused(tmp_path):
    ckpt = tmp_path / "checkpoint-4"
    ckpt.mkdir()
    (ckpt / "config.json").write_text("{}")
    with pytest.raises(SystemExit, match=f"error: {ckpt} holds no \\*.safetensors weights"):
        merge({"path": str(ckpt)}, tmp_path / "model")
