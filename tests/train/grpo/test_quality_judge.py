"""The reward's quality judge (lazymem/train/grpo/quality_judge.py): strict reply parsing, retries, the prompt
template, and the real client against a fake OpenAI-compatible server."""

from __future__ import annotations

import asyncio
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from lazymem.llm.client import Completion
from lazymem.train.grpo.quality_judge import (
    JudgeConfig,
    JudgeItem,
    JudgeParseError,
    QualityJudge,
    load_template,
    parse_reply,
)


def test_the_judge_has_no_second_llm_schema():
    """Model, server and decoding belong to llm.roles.reward_judge: the old judge keys are refused."""
    with pytest.raises(TypeError, match="unknown judge settings.*base_url"):
        JudgeConfig.from_mapping({"base_url": "http://127.0.0.1:8000/v1", "model": "qwen3-32b"})
    with pytest.raises(ValueError, match="judge.llm is not set"):
        QualityJudge(JudgeConfig())


GOOD = {
    "faithfulness": 2,
    "utility": 1,
    "unsupported_claims": [],
    "useful_evidence": ["Paris"],
    "reason": "ok",
}


def test_parse_reply_accepts_the_schema():
    assert parse_reply(json.dumps(GOOD)) == GOOD
    assert parse_reply(Completion("<think>hmm</think>\n" + json.dumps(GOOD)).text)["utility"] == 1
    assert parse_reply("```json\n" + json.dumps(GOOD) + "\n```")["faithfulness"] == 2


@pytest.mark.parametrize(
    "reply",
    [
        json.dumps(GOOD) + " extra",
        json.dumps([GOOD]),
        json.dumps({k: v for k, v in GOOD.items() if k != "reason"}),
        json.dumps({**GOOD, "score": 1}),
        json.dumps({**GOOD, "faithfulness": 3}),
        json.dumps({**GOOD, "faithfulness": True}),
        json.dumps({**GOOD, "utility": 1.0}),
        json.dumps({**GOOD, "useful_evidence": "Paris"}),
        "faithfulness: 2",
        "",
    ],
)
def test_parse_reply_rejects_anything_else(reply):
    with pytest.raises(JudgeParseError):
        parse_reply(reply)


class FakeClient:
    """Stands in for LLMClient.chat: replies in order, records each call."""

    def __init__(self, replies: list[str | None]):
        self.replies, self.calls = list(replies), []

    async def chat(self, messages, *, prompt_version, response_format, sample):
        self.calls.append({"messages": messages, "version": prompt_version, "sample": sample})
        text = self.replies.pop(0)
        return Completion("", error="timeout after 180s") if text is None else Completion(text)


ITEM_SRC = {"role": "user", "content": 'I said "hi"\nin Paris', "timestamp": "2023/05/01"}


def judge_item(memory: str = "User was in Paris.") -> JudgeItem:
    return JudgeItem("Where was I?", "2023/06/01", "Paris", "chain", ITEM_SRC, memory)


def test_judge_retries_an_unparsable_reply_then_succeeds():
    fake = FakeClient(["not json", json.dumps(GOOD)])
    score = asyncio.run(QualityJudge(JudgeConfig(parse_retries=1), client=fake).score(judge_item()))
    assert (score.faithfulness, score.utility, score.error) == (2, 1, None) and score.q == 0.75
    assert [c["sample"] for c in fake.calls] == [0, 1]  # a new sample index: no cached repeat
    payload = json.loads(fake.calls[0]["messages"][1]["content"])
    assert payload["source_messages"] == [ITEM_SRC] and payload["constructed_memory"] == "User was in Paris."
    assert payload["gold_answer"] == "Paris" and set(payload["required_output"]) == set(GOOD)
    assert fake.calls[0]["version"].startswith("reward_judge@")


def test_judge_errors_are_recorded_and_score_zero():
    fake = FakeClient(["nope", "still nope"])
    score = asyncio.run(QualityJudge(JudgeConfig(parse_retries=1), client=fake).score(judge_item()))
    assert score.error.startswith("unparsable reply") and score.q == 0.0 and score.reply == "still nope"
    fake = FakeClient([None])
    score = asyncio.run(QualityJudge(JudgeConfig(parse_retries=2), client=fake).score(judge_item()))
    assert score.error.startswith("request failed") and len(fake.calls) == 1  # the client already retried


def test_template_override_changes_prompt_and_version(tmp_path):
    path = tmp_path / "judge.json"
    path.write_text(json.dumps({"system": "Be terse."}))
    base, custom = load_template(), load_template(path)
    assert custom.system == "Be terse." and custom.rules == base.rules and custom.version != base.version
    path.write_text(json.dumps({"sytem": "typo"}))
    with pytest.raises(ValueError, match="unknown keys"):
        load_template(path)


class _FakeOpenAI(BaseHTTPRequestHandler):
    bodies: list[dict] = []

    def do_POST(self):  # noqa: N802 (http.server's naming)
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        type(self).bodies.append(body)
        content = "<think>short</think>" + json.dumps(GOOD)
        reply = {
            "id": "x",
            "object": "chat.completion",
            "created": 0,
            "model": body["model"],
            "choices": [
                {"index": 0, "message": {"role": "assistant", "content": content}, "finish_reason": "stop"}
            ],
            "usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15},
        }
        data = json.dumps(reply).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args):
        pass


def test_real_client_sends_the_judge_settings_and_caches(tmp_path):
    server = ThreadingHTTPServer(("127.0.0.1", 0), _FakeOpenAI)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    _FakeOpenAI.bodies = []
    try:
        rc = {
            "backend": "endpoint",
            "base_url": f"http://127.0.0.1:{server.server_port}/v1",
            "dialect": "vllm",
            "served_name": "qwen3-32b",
            "structured": True,
            "decoding": {"temperature": 0.0, "max_tokens": 1024, "thinking": True, "thinking_budget": 512},
        }
        judge = QualityJudge(JudgeConfig(llm=rc, cache_path=str(tmp_path / "judge.sqlite")))

        async def twice():
            return [await judge.score(judge_item()), await judge.score(judge_item())]

        first, second = asyncio.run(twice())
    finally:
        server.shutdown()
    assert first.q == second.q == 0.75 and first.error is None
    assert len(_FakeOpenAI.bodies) == 1  # the second answer came from the cache
    body = _FakeOpenAI.bodies[0]
    assert body["model"] == "qwen3-32b" and body["temperature"] == 0.0 and body["max_tokens"] == 1024
    assert body["response_format"]["type"] == "json_schema"
    assert body["chat_template_kwargs"] == {"enable_thinking": True} and body["thinking_token_budget"] == 512


@pytest.mark.slow
@pytest.mark.solo
def test_the_cpu_judge_on_llama_cpp_answers_in_the_schema(tmp_path):
    """The bundled 0.5B, unconstrained, echoes the prompt's JSON back instead of grading (every call of a
    chain_mini GRPO run failed so); the CPU role decodes under the reply schema, so its replies parse."""
    from lazymem.llm.llm_set import ServerRegistry, build_client, role_config

    from helpers_llm import llm_conf

    role = role_config(llm_conf("cpu"), "reward_judge")
    assert role["structured"] and role["backend"] == "llamacpp"
    item = JudgeItem(
        query="Where did I buy my sculpting tools?",
        query_time="2023/05/30 (Tue) 10:00",
        answer="At the local art store",
        reasoning=None,
        source={
            "role": "user",
            "content": "I got my own set of sculpting tools today at the local art store.",
            "timestamp": "2023/05/20 (Sat) 14:00",
        },
        memory="User bought sculpting tools at the local art store.",
    )
    with ServerRegistry(tmp_path) as servers:
        judge = QualityJudge(JudgeConfig(llm=role, parse_retries=0), build_client(role, servers, None))
        score = asyncio.run(judge.score(item))
    assert score.error is None, score.reply
    assert score.faithfulness in (0, 1, 2) and score.utility in (0, 1, 2)
