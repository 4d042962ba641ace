"""conf/llm/*.yaml compose with the real root config and turn into the intended clients and servers."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest
from omegaconf import OmegaConf

from lazymem.conf import CONF_DIR
from lazymem.llm.backends import (
    get_backend,
)
from lazymem.llm.llm_set import LLMSet, ServerRegistry, role_config

from helpers_llm import llm_conf

CONF = CONF_DIR


class StubRegistry:
    """Records what servers would be started, starts nothing."""

    def __init__(self):
        self.calls: list[tuple] = []
        self.options: dict[tuple, dict] = {}

    def get(self, backend):
        options = backend.options
        self.calls.append(
            (backend.name, backend.model, backend.served_name, json.dumps(options, sort_keys=True))
        )
        self.options[self.calls[-1]] = options
        base = options.get("base_url") or f"http://127.0.0.1:{8000 + len(set(self.calls))}/v1"
        return SimpleNamespace(base_url=base, served_name=backend.served_name)

    def close(self):
        pass


def test_cpu_roles_share_the_bundled_qwen_on_llamacpp(tmp_path):
    cfg = llm_conf("cpu", f"llm.cache_path={tmp_path}/c.sqlite")
    assert {"memory", "answer", "judge", "teacher"} <= set(cfg["roles"])
    reg = StubRegistry()
    llms = LLMSet(cfg, tmp_path, registry=reg)
    clients = {r: llms[r] for r in llms.roles}
    # every role on one Qwen server, except the main table's small memory model (its own SmolLM2 server)
    servers = {call[:3] for call in reg.calls}
    assert servers == {
        ("llamacpp", "bundled:qwen2.5-0.5b", "qwen2.5-0.5b"),
        ("llamacpp", "bundled:smollm2-135m", "smollm2-135m"),
    }
    assert clients["memory_small"].cfg.served_name == "smollm2-135m"
    assert all(c.cfg.dialect.name == "llamacpp" and c.cfg.api_key_env is None for c in clients.values())
    assert clients["memory"].cfg.structured and not clients["answer"].cfg.structured
    assert clients["judge"].cfg.decoding.temperature == 0.0
    assert "sha256:1d9614638d" in clients["memory"].cfg.model_id
    assert all(c.cache is llms.cache for c in clients.values()) and llms.cache is not None


def test_paper_roles(tmp_path, monkeypatch):
    monkeypatch.setenv("DEEPSEEK_API_KEY", "sk-test-000000")
    cfg = llm_conf("paper")
    reg = StubRegistry()
    llms = LLMSet(cfg, tmp_path, registry=reg)
    mem, ans, judge, rj = llms["memory"], llms["answer"], llms["judge"], llms["reward_judge"]
    vllm_calls = {c for c in reg.calls if c[0] == "vllm"}
    assert len(vllm_calls) == 1  # memory and answer: one Qwen3-32B server
    assert mem.cfg.concurrency == 64 and mem.cfg.decoding.thinking is True and mem.cfg.dialect.name == "vllm"
    assert ans.cfg.base_url == mem.cfg.base_url
    assert judge.cfg.base_url == "https://api.deepseek.com/v1" and judge.cfg.api_key_env == "DEEPSEEK_API_KEY"
    # every role's thinking is explicit: the DeepSeek judge off, the DeepSeek teacher and reward judge on
    assert judge.cfg.decoding.temperature == 0.0 and judge.cfg.decoding.thinking is False
    teacher = llms["teacher"]
    assert teacher.cfg.decoding.thinking is True and not teacher.cfg.structured  # decoded freely
    assert rj.cfg.decoding.thinking is True
    assert (rj.cfg.decoding.max_tokens, rj.cfg.decoding.thinking_budget, rj.cfg.timeout_s) == (1024, 512, 180)
    # RL's reward workers reach one hand-started vLLM judge server; it takes vLLM's thinking budget
    assert rj.cfg.base_url == "http://127.0.0.1:8000/v1" and rj.cfg.dialect.name == "vllm"
    assert rj.cfg.model_id == "http://127.0.0.1:8000/v1#qwen3-32b" and rj.cfg.api_key_env is None
    assert "sk-test" not in OmegaConf.to_yaml(OmegaConf.create(cfg))


def test_paper_4b_gives_the_memory_model_its_own_server(tmp_path, monkeypatch):
    monkeypatch.setenv("DEEPSEEK_API_KEY", "sk-test-000000")
    cfg = llm_conf("paper_4b")
    reg = StubRegistry()
    llms = LLMSet(cfg, tmp_path, registry=reg)
    mem, ans = llms["memory"], llms["answer"]
    assert mem.cfg.served_name == "lazymem-4b" and mem.cfg.base_url != ans.cfg.base_url
    specs = {c for c in reg.calls if c[0] == "vllm"}
    assert sorted(reg.options[c]["gpu_memory_utilization"] for c in specs) == [0.25, 0.9]
    # a GPU plan places the memory role where it puts the 4B model (llm.roles.memory_small)
    placed = llm_conf("paper_4b", "placement=gpu2")
    small, memory = role_config(placed, "memory_small")["vllm"], role_config(placed, "memory")["vllm"]
    keys = ("gpus", "tensor_parallel_size", "data_parallel_size", "gpu_memory_utilization")
    assert [memory[k] for k in keys] == [small[k] for k in keys] == ["1", 1, 1, 0.5]
    assert role_config(placed, "answer")["vllm"]["gpus"] == "0"


def test_missing_api_key_fails_before_any_call(tmp_path, monkeypatch):
    monkeypatch.delenv("DEEPSEEK_API_KEY", raising=False)
    llms = LLMSet(llm_conf("paper"), tmp_path, registry=StubRegistry())
    with pytest.raises(RuntimeError, match="DEEPSEEK_API_KEY"):
        llms["judge"]


def test_cache_can_be_disabled(tmp_path):
    llms = LLMSet(llm_conf("cpu", "llm.cache=false"), tmp_path, registry=StubRegistry())
    assert llms.cache is None and llms["answer"].cache is None


def test_role_config_merges_common_and_gives_an_unlisted_role_common():
    cfg = {
        "common": {"backend": "llamacpp", "decoding": {"temperature": 0.7, "max_tokens": 9}},
        "roles": {"a": {"decoding": {"temperature": 0.0}}},
    }
    assert role_config(cfg, "a")["decoding"] == {"temperature": 0.0, "max_tokens": 9}
    # a role only a method declares (a method of your own): the preset's common server and decoding
    assert role_config(cfg, "b") == cfg["common"]
    with pytest.raises(ValueError, match="backend"):
        role_config({"common": {"backend": "tgi"}, "roles": {"a": {}}}, "a")


def test_registry_reuses_servers_by_spec(tmp_path):
    reg = ServerRegistry(tmp_path)

    def endpoint(url):
        return get_backend({"backend": "endpoint", "base_url": url, "served_name": "m", "model": "ignored"})

    a = reg.get(endpoint("http://x/v1"))
    assert reg.get(endpoint("http://x/v1")) is a
    assert reg.get(endpoint("http://y/v1")) is not a
    assert len(reg) == 2
    reg.close()
    assert len(reg) == 0
