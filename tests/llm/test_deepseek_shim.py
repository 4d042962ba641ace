"""The middleware that gives the rehearsal's vLLM DeepSeek's thinking switch (lazymem/llm/deepseek_shim.py):
a DeepSeek request reads as DeepSeek's API would read it, any other passes untouched."""

from __future__ import annotations

import asyncio
import json

from lazymem.llm.deepseek_shim import DeepSeekThinking, as_deepseek


def receive_from(*messages):
    queue = list(messages)

    async def receive():
        return queue.pop(0)

    return receive


def test_the_rehearsal_middleware_reads_a_deepseek_request_as_deepseek_does():
    seen = []

    async def app(scope, receive, send):
        message = await receive()
        seen.append((dict(scope["headers"]), json.loads(message["body"])))

    shim = DeepSeekThinking(app)
    for thinking, enabled in ((None, True), ({"type": "enabled"}, True), ({"type": "disabled"}, False)):
        body = {
            "model": "deepseek-v4-pro",
            "max_tokens": 10,
            "chat_template_kwargs": {"enable_thinking": False},
        }
        body |= {"thinking_token_budget": 8} | ({"thinking": thinking} if thinking else {})
        raw = json.dumps(body).encode()
        scope = {"type": "http", "method": "POST", "path": "/v1/chat/completions"}
        scope["headers"] = [(b"content-length", str(len(raw)).encode())]
        half = len(raw) // 2
        parts = ({"type": "http.request", "body": raw[:half], "more_body": True},
                 {"type": "http.request", "body": raw[half:], "more_body": False})  # fmt: skip
        asyncio.run(shim(scope, receive_from(*parts), None))
        headers, got = seen[-1]
        # DeepSeek has no chat template switch and no budget field: only its own `thinking` counts
        assert got == {
            "model": "deepseek-v4-pro",
            "max_tokens": 10,
            "chat_template_kwargs": {"enable_thinking": enabled},
        }
        assert int(headers[b"content-length"]) == len(json.dumps(got).encode())
    qwen = json.dumps({"model": "qwen3-32b", "chat_template_kwargs": {"enable_thinking": False}}).encode()
    assert as_deepseek(qwen) == qwen  # the server's own roles are untouched
