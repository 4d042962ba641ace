"""Model memory estimates (lazymem/gpu/model_memory.py) from real architectures' config.json, and from weight
files when there are some."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from lazymem.gpu.model_memory import activation_gib, kv_gib, lora_params, model_gib, param_total

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


def test_an_encoders_batch_of_16_by_8192_tokens_takes_far_more_than_2_gib(models):
    """N24: retrieval=paper_gpu encodes 16 texts of up to 8,192 tokens per pass with Qwen3-Embedding-8B
    (hidden 4096, gated MLP 12288). One layer's peak per token, (2 x 4096 + 3 x 12288) bf16 values, is 88 KiB:
    11.0 GiB for 131,072 tokens, plus SDPA's boolean padding mask, 16 x 8192^2 bytes = 1.0 GiB. The flat
    2 GiB that the plan charged before covers a sixth of it."""
    act = activation_gib(models["Qwen3-Embedding-8B"], 16, 8192, "bfloat16")
    assert act == pytest.approx(12.0) and act > 2.0
    assert activation_gib(models["Qwen3-Embedding-8B"], 2, 8192, "bfloat16") == pytest.approx(1.5)
    # the reranker's 32 pairs of 1,024 tokens in float16: (2 x 1024 + 2 x 4096) x 2 bytes a token, + mask
    assert activation_gib(models["bge-reranker-v2-m3"], 32, 1024, "float16") == pytest.approx(0.656, abs=1e-3)
    assert activation_gib(models["Qwen3-32B"].parent / "absent", 16, 8192) is None


def test_parameters_come_from_the_weight_files_or_the_config(models):
    assert param_total(models["Qwen3-4B"]) == pytest.approx(4.02e9, rel=1e-3)  # Qwen3-4B: 4.0B
    d = models["bge-reranker-v2-m3"]
    (d / "model.safetensors").write_bytes(b"\0" * 4096)  # float32 on disk: 1,024 parameters
    assert param_total(d) == 1024
    # rank-64 adapters on every linear layer of the 4B's 36 blocks: 132M parameters (3.3% of the model)
    per_block = 2 * (2560 + 4096) + 2 * (2560 + 1024) + 3 * (2560 + 9728)  # q, o; k, v; gate, up, down
    assert lora_params(models["Qwen3-4B"], 64) == 64 * 36 * per_block == 132_120_576
