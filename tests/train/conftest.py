"""Fixtures of the checkpoints' disk-space tests (train_sft's and every GRPO engine's): a fake Qwen3-4B model
directory (its real config.json, no weights) and the free space shutil.disk_usage reports."""

from __future__ import annotations

import json
from collections import namedtuple
from pathlib import Path

import pytest

from lazymem.train import checkpoint_disk
from lazymem.train.checkpoint_disk import GIB

from helpers_llm import MODEL_CONFIGS


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
