"""End to end through a real llama.cpp server and the bundled GGUF models (slow: seconds per test)."""

from __future__ import annotations

import asyncio
import importlib.util
import json

import pytest

from lazymem.llm.client import ClientConfig, Decoding, LLMClient, json_schema_format
from lazymem.llm.llamacpp_server import LlamaCppServer
from lazymem.llm.llm_set import build_llms
from lazymem.llm.models import resolve_model

from helpers_llm import alive, group_members, llm_conf, spawn_parent, wait_until

pytestmark = [
    pytest.mark.slow,
    pytest.mark.solo,
    pytest.mark.skipif(
        importlib.util.find_spec("llama_cpp") is None, reason="llama-cpp-python not installed"
    ),
]

WINDOW = [
    "[2023-05-01] user: I finally adopted a cat last week, her name is Miso.",
    "[2023-05-01] assistant: Congratulations! How is Miso settling in?",
    "[2023-05-02] user: By the way, the weather has been terrible all week.",
]
QUESTION = "What is the name of the user's cat?"
DECISIONS = {
    "type": "array",
    "minItems": len(WINDOW),
    "maxItems": len(WINDOW),
    "items": {
        "type": "object",
        "properties": {
            "op": {"type": "string", "enum": ["KEEP", "DROP"]},
            # bounded strings keep a looping small model from running into max_tokens mid-JSON
            "compressed_content": {"type": "string", "maxLength": 80},
            "reason": {"type": "string", "maxLength": 80},
        },
        "required": ["op", "compressed_content", "reason"],
    },
}
PROMPT = (
    f"Question: {QUESTION}\nMessages:\n"
    + "\n".join(f"{i}. {m}" for i, m in enumerate(WINDOW))
    + "\nFor each message, in order, output an object with op (KEEP if it helps answer the question, "
    "else DROP), compressed_content (the useful fact, empty for DROP) and reason. Output a JSON array only."
)


def exercise(name: str, log_dir, max_tokens: int = 160) -> dict:
    """Start a server on a bundled model, make a plain and a structured call, return what was seen."""
    with LlamaCppServer(resolve_model(f"bundled:{name}"), name, log_dir, n_threads=1) as server:
        pid = server.pid
        assert group_members(pid) == [pid]
        cfg = ClientConfig(
            server.base_url, name, dialect="llamacpp", decoding=Decoding(max_tokens=max_tokens)
        )
        client = LLMClient(cfg)

        async def calls():
            plain = await client.chat(
                [{"role": "user", "content": "What is the capital of France? One word."}]
            )
            story = await client.chat(
                [{"role": "user", "content": "Write a short story about a cat."}], max_tokens=96
            )
            structured = await client.chat(
                [{"role": "user", "content": PROMPT}],
                response_format=json_schema_format(DECISIONS),
                max_tokens=300,
            )
            return plain, story, structured

        plain, story, structured = asyncio.run(calls())
        startup_s = server.startup_s
    assert wait_until(lambda: not group_members(pid), 5), "server process group still alive after exit"
    for c in (plain, story, structured):
        assert c.ok, c.error
    assert "paris" in plain.text.lower()
    assert structured.finish_reason == "stop"
    # llama-cpp-python's JSON grammar lets raw control characters (newlines) into strings: strict=False
    decisions = json.loads(structured.text, strict=False)
    assert len(decisions) == len(WINDOW)
    assert all(d["op"] in ("KEEP", "DROP") and isinstance(d["compressed_content"], str) for d in decisions)
    seen = {
        "startup_s": round(startup_s, 2),
        "gen_tok_per_s": round(story.completion_tokens / story.latency_s, 1),
        "ops": [d["op"] for d in decisions],
        "structured": structured.text,
    }
    print(f"\n{name}: {seen}")
    return seen


def test_smollm2_chat_and_structured_output(tmp_path):
    exercise("smollm2-135m", tmp_path)


def test_qwen_chat_and_structured_output(tmp_path):
    exercise("qwen2.5-0.5b", tmp_path)  # plumbing only: which ops a 0.5B model picks is not asserted


def test_roles_from_cpu_yaml_share_one_server_and_cache(tmp_path):
    cfg = llm_conf("cpu", f"llm.cache_path={tmp_path}/llm.sqlite", "llm.common.decoding.max_tokens=32")
    with build_llms(cfg, tmp_path / "servers") as llms:
        question = [{"role": "user", "content": "Reply with the single word: yes"}]
        first = asyncio.run(llms["judge"].chat(question, prompt_version="judge-v1"))
        again = asyncio.run(llms["judge"].chat(question, prompt_version="judge-v1"))
        other = asyncio.run(llms["answer"].chat(question, prompt_version="answer-v1"))
        assert len(llms.registry) == 1
        assert first.ok and other.ok and again.cached and again.text == first.text
        assert llms["memory"].cfg.base_url == llms["judge"].cfg.base_url
        server = next(iter(llms.registry._servers.values()))
        pid = server.pid
        assert list((tmp_path / "servers").glob("llamacpp-qwen2.5-0.5b-*.log"))
    assert wait_until(lambda: not alive(pid), 5)


def test_sigkilled_parent_leaves_no_orphan_llama_server(tmp_path):
    parent, server_pid = spawn_parent(tmp_path, [], "llama", "sleep")
    assert alive(server_pid)
    parent.kill()
    parent.wait(10)
    assert wait_until(lambda: not alive(server_pid), 5), "llama.cpp server outlived its SIGKILLed parent"
