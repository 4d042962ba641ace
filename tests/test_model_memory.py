"""Model memory estimates (lazymem/model_memory.py) from real architectures' config.json, and from weight
files when there are some."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from lazymem.model_memory import kv_gib, model_gib

from helpers_llm import write_model_dirs


@pytest.fixture
def models(tmp_path) -> dict[str, Path]:
    return write_model_dirs(tmp_path)


def test_estimates_from_config_json_match_the_models(models):
    assert model_gib(models["Qwen3-32B"], "bfloat16") == pytest.approx(61.0, abs=0.3)
    assert model_gib(models["Qwen3-4B"], "bfloat16") == pytest.approx(7.5, abs=0.2)
    assert model_gib(models["Qwen3-Embedding-8B"], "bfloat16") == pytest.approx(14.1, abs=0.3)
    assert model_gib(models["bge-reranker-v2-m3"], "float16") == pytest.approx(1.06, abs=0.05)
    assert model_gib(models["bge-reranker-v2-m3"], None) == pytest.approx(2.1, abs=0.1)  # stored float32
    # vLLM must hold one max_model_len sequence: 32k tokens of the 32B take 8 GiB, 16k of the 4B 2.25
    assert kv_gib(models["Qwen3-32B"], 32768, "bfloat16") == pytest.approx(8.0)
    assert kv_gib(models["Qwen3-4B"], 16384, "bfloat16") == pytest.approx(2.25)
    assert model_gib(models["Qwen3-32B"].parent / "absent", "bfloat16") is None


def test_weight_files_win_over_the_config_and_are_scaled_to_the_loaded_dtype(models):
    d = models["bge-reranker-v2-m3"]
    (d / "model.safetensors").write_bytes(b"\0" * 4096)  # float32 on disk
    assert model_gib(d, "float16") * 2**30 == pytest.approx(2048)
    (d / "model.safetensors.index.json").write_text(json.dumps({"metadata": {"total_size": 2**31}}))
    assert model_gib(d, None) == pytest.approx(2.0)
