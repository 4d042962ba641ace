"""DeepSeek's thinking switch on a local vLLM server that stands in for DeepSeek's API (the rehearsal).

DeepSeek-V4 thinks unless a request's body says ``thinking: {type: disabled}``; it has no chat template
switch, and its ``max_tokens`` counts the reasoning (api-docs.deepseek.com/guides/thinking_mode). vLLM
ignores a ``thinking`` field (vllm/entrypoints/serve/engine/protocol.py:37-76, extra fields are logged and
dropped) and reads ``chat_template_kwargs`` instead; its ``max_tokens`` counts the reasoning too. Loaded
into vLLM's server with ``--middleware lazymem.llm.deepseek_shim.DeepSeekThinking``, this ASGI middleware
rewrites each chat request for a ``deepseek-*`` model as DeepSeek would read it, so a Qwen3 model thinks
exactly when DeepSeek would. It imports nothing: it runs inside vLLM's own environment.
"""

from __future__ import annotations

import json
from typing import Any


def as_deepseek(raw: bytes) -> bytes:
    """A chat request body, rewritten as DeepSeek's API reads it when its model is a ``deepseek-*`` name:
    thinking on unless ``thinking.type`` is ``disabled``, any ``chat_template_kwargs`` or vLLM thinking
    budget ignored. Any other body comes back unchanged."""
    try:
        body = json.loads(raw)
    except ValueError:
        return raw
    if not isinstance(body, dict) or not str(body.get("model", "")).startswith("deepseek"):
        return raw
    switch = body.pop("thinking", None)
    body.pop("thinking_token_budget", None)
    disabled = isinstance(switch, dict) and switch.get("type") == "disabled"
    body["chat_template_kwargs"] = {"enable_thinking": not disabled}
    return json.dumps(body).encode()


class DeepSeekThinking:
    """ASGI middleware: POST .../chat/completions bodies go through :func:`as_deepseek`."""

    def __init__(self, app: Any):
        self.app = app

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        chat = scope["type"] == "http" and scope["method"] == "POST"
        if not (chat and scope["path"].endswith("/chat/completions")):
            await self.app(scope, receive, send)
            return
        chunks, message = [], {"more_body": True}
        while message.get("more_body"):
            message = await receive()
            if message["type"] != "http.request":
                return  # the client went away before its request was whole: nothing to answer
            chunks.append(message.get("body", b""))
        body = as_deepseek(b"".join(chunks))
        headers = [(k, v) for k, v in scope["headers"] if k.lower() != b"content-length"]
        scope = {**scope, "headers": [*headers, (b"content-length", str(len(body)).encode())]}
        sent = False

        async def replay() -> dict:
            nonlocal sent
            if sent:
                return await receive()
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}

        await self.app(scope, replay, send)
