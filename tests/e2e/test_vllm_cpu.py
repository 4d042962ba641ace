"""vLLM on the CPU: paper mode's serving path (the `vllm` backend, our server launch and client) run through
PyPI's CPU build of vLLM in .venv-vllm (make setup-vllm) on a tiny random Qwen3 (scripts/tiny_qwen3.py),
with the flags paper mode passes on a GPU node: reasoning parser, thinking switch, JSON-schema decoding.
The replies are meaningless; what is tested is that the server starts, serves the role's name, and answers
plain and structured requests through the same code a GPU run uses."""

from __future__ import annotations

import asyncio
import json
import subprocess

import pytest

from lazymem.llm.backends import get_backend
from lazymem.llm.client import json_schema_format
from lazymem.llm.llm_set import build_llms, role_config

from helpers import ROOT
from helpers_llm import llm_conf

pytestmark = pytest.mark.slow
VLLM_PY = ROOT / ".venv-vllm" / "bin" / "python"
SFT_PY = ROOT / ".venv-sft" / "bin" / "python"


@pytest.fixture(scope="module")
def tiny_qwen3(tmp_path_factory):
    if not VLLM_PY.exists() or not SFT_PY.exists():
        pytest.skip("needs .venv-vllm (make setup-vllm) and .venv-sft (make setup-sft)")
    out = tmp_path_factory.mktemp("tiny-qwen3")
    cmd = [SFT_PY, "scripts/tiny_qwen3.py", out, "--hidden", "256", "--vocab", "600"]
    subprocess.run([str(c) for c in cmd], cwd=ROOT, check=True, capture_output=True, timeout=300)
    return out


def test_paper_roles_served_by_vllm_on_the_cpu(tiny_qwen3, tmp_path):
    cfg = llm_conf(
        "paper",
        f"llm.common.model={tiny_qwen3}",
        "llm.common.served_name=tiny-qwen3",
        "llm.common.vllm.device=cpu",
        "llm.common.vllm.dtype=float32",
        "llm.common.vllm.max_model_len=1024",
        "llm.common.vllm.startup_timeout_s=600",
        "llm.common.decoding.max_tokens=48",
        "llm.common.decoding.thinking=false",
        "llm.cache=false",
    )
    # preflight: the environment's vLLM is of the pinned series and has every flag the launch passes
    assert get_backend(role_config(cfg, "memory")).problems("llm.roles.memory") == []
    schema = {"type": "array", "items": {"type": "string", "maxLength": 4}, "minItems": 1, "maxItems": 2}
    with build_llms(cfg, tmp_path / "servers") as llms:
        memory, answer = llms["memory"], llms["answer"]
        plain = asyncio.run(answer.chat([{"role": "user", "content": "Hello"}]))
        shaped = asyncio.run(
            memory.chat(
                [{"role": "user", "content": "JSON please"}], response_format=json_schema_format(schema)
            )
        )
        assert len(llms.registry) == 1  # memory and answer share the one server of the same weights
        server = memory.server
        assert (
            server is answer.server
            and server.kind == "vllm"
            and server.command[1:3] == ["-m", "vllm.entrypoints.openai.api_server"]
        )
        assert "--reasoning-parser" in server.command and "--gpu-memory-utilization" not in server.command
    assert plain.ok, plain.error
    assert shaped.ok, shaped.error
    value = json.loads(shaped.text)  # xgrammar held the random model to the schema
    assert isinstance(value, list) and 1 <= len(value) <= 2 and all(len(v) <= 4 for v in value)
