"""vLLM on the CPU: paper mode's serving path (the `vllm` backend, our server launch and client) run through
PyPI's CPU build of vLLM in .venv-vllm (make setup-vllm) on a tiny random Qwen3 (scripts/tiny_qwen3.py),
with the flags paper mode passes on a GPU node: reasoning parser, thinking switch, JSON-schema decoding.
The replies are meaningless; what is tested is that the server starts, serves the role's name, and answers
plain and structured requests through the same code a GPU run uses, and that the same server answers the
paper's teacher role in DeepSeek's dialect (build_sft). One server start serves both: each costs ~25-45 s
of CI time."""

from __future__ import annotations

import asyncio
import json

import pytest

from lazymem.llm.backends import get_backend
from lazymem.llm.client import json_schema_format
from lazymem.llm.llm_set import build_llms, role_config

from helpers import ROOT, run_cli
from helpers_llm import llm_conf

pytestmark = [pytest.mark.slow, pytest.mark.solo]
VLLM_PY = ROOT / ".venv-vllm" / "bin" / "python"
SFT_PY = ROOT / ".venv-sft" / "bin" / "python"


@pytest.fixture(scope="module")
def tiny_qwen3(request):
    if not VLLM_PY.exists() or not SFT_PY.exists():
        pytest.skip("needs .venv-vllm (make setup-vllm) and .venv-sft (make setup-sft)")
    return request.getfixturevalue("tiny_models") / "qwen3"  # built only where it runs


def test_paper_roles_and_a_deepseek_dialect_teacher_served_by_vllm_on_the_cpu(tiny_qwen3, tmp_path):
    cfg = llm_conf(
        "paper",
        f"llm.common.model={tiny_qwen3}",
        "llm.common.served_name=tiny-qwen3",
        "llm.common.vllm.device=cpu",
        "llm.common.vllm.dtype=float32",
        "llm.common.vllm.max_model_len=4096",
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
        teacher = build_sft_with_deepseek_teacher(server.base_url, "tiny-qwen3", tmp_path)
    assert plain.ok, plain.error
    assert shaped.ok, shaped.error
    value = json.loads(shaped.text)  # xgrammar held the random model to the schema
    assert isinstance(value, list) and 1 <= len(value) <= 2 and all(len(v) <= 4 for v in value)
    # the paper's teacher role (endpoint, DeepSeek dialect: json_object, never json_schema) against the same
    # vLLM: every window's call is answered and reaches the format gate (random replies fail it)
    assert teacher.returncode == 0, teacher.stderr[-3000:]
    st = json.loads((tmp_path / "run" / "sft_stats.json").read_text())
    assert st["windows"] > 0 and st["annotated_valid"] + st["discarded_total"] == st["windows"]
    assert st["discarded"].get("call_error", 0) == 0  # json_object was accepted: no 400, no failed call
    assert "refused" not in teacher.stderr


def build_sft_with_deepseek_teacher(base_url: str, served_name: str, tmp_path):
    return run_cli(
        "+experiment=build_sft_cpu",
        "train.sft.n_questions=1",
        "train.sft.val_questions=0",
        "retrieval.n=3",
        "w=1",
        "++llm.roles.teacher.backend=endpoint",
        f"++llm.roles.teacher.base_url={base_url}",
        "++llm.roles.teacher.dialect=deepseek",
        f"++llm.roles.teacher.served_name={served_name}",
        "++llm.roles.teacher.decoding.max_tokens=64",
        f"hydra.run.dir={tmp_path / 'run'}",
        env={"LAZYMEM_CACHE": str(tmp_path / "cache")},
        timeout=900,
    )
