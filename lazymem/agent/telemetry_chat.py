"""The agent memory's model-call spans (OpenTelemetry): around each call to a model server during a traced
operation, a CLIENT span `chat {model}`, with `gen_ai.client.operation.duration` and
`gen_ai.client.token.usage` (lazymem/llm/client.py: CHAT_OBSERVER, which `Telemetry.chat` answers with a
`Chat`). Neither the prompt nor the reply is recorded.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any
from urllib.parse import urlsplit

from opentelemetry.trace import SpanKind, StatusCode

from lazymem.llm.client import ClientConfig
from lazymem.llm.completion import Completion

# attribute names, as telemetry.py has them: it imports this module, so this one cannot import them from it
OPERATION = "gen_ai.operation.name"
ERROR_TYPE = "error.type"


def provider_name(cfg: ClientConfig) -> str:
    """`gen_ai.provider.name` of a chat client: `deepseek` for DeepSeek's API, else `openai`. Every server
    lazymem calls (vLLM, llama.cpp, a hosted API) speaks OpenAI's chat API, and the attribute names the API's
    flavour as the instrumentation knows it (the conventions allow a proxy's or a compatible server's
    provider to differ from the upstream one); which server answered is `server.address`, and the dialect
    (`vllm`, `llamacpp`, ...) `lazymem.llm.dialect`."""
    return "deepseek" if cfg.dialect.name == "deepseek" else "openai"


def _chat_error_type(error: str) -> str:
    """A low-cardinality `error.type` of a failed chat call, from its error (lazymem/llm/client.py)."""
    if error.startswith("HTTP "):
        return error[5:8]  # the status code
    for prefix, kind in (
        ("timeout", "timeout"),
        ("connection error", "connection_error"),
        ("malformed response", "malformed_response"),
        ("empty completion", "empty_completion"),
        ("context exceeded", "context_exceeded"),
    ):
        if error.startswith(prefix):
            return kind
    return "_OTHER"


class Chat:
    """The span and metrics of one chat call (lazymem/llm/client.py: CHAT_OBSERVER), child of the current
    span. `with telemetry.chat(cfg) as seen: done = ...; seen(done)`."""

    def __init__(self, telemetry: Any, cfg: ClientConfig):  # a Telemetry: its tracer, chat_* histograms
        self.telemetry = telemetry
        self.labels: dict[str, Any] = {
            OPERATION: "chat",
            "gen_ai.provider.name": provider_name(cfg),
            "gen_ai.request.model": cfg.served_name,
        }
        try:
            url = urlsplit(cfg.base_url)
            if url.hostname:
                self.labels["server.address"] = url.hostname
                if url.port:
                    self.labels["server.port"] = url.port
        except ValueError:
            pass
        self.dialect = cfg.dialect.name

    def __enter__(self) -> Callable[[Completion], None]:
        attributes = {**self.labels, "lazymem.llm.dialect": self.dialect}
        self.span = self.telemetry.tracer.start_span(
            f"chat {self.labels['gen_ai.request.model']}",
            kind=SpanKind.CLIENT,
            attributes=attributes,
            record_exception=False,
            set_status_on_exception=False,
        )
        self.start = time.perf_counter()
        self.completion: Completion | None = None
        return self._seen

    def _seen(self, done: Completion) -> None:
        self.completion = done

    def __exit__(self, kind, exc, tb) -> None:
        done, labels, span = self.completion, dict(self.labels), self.span
        if exc is not None:
            labels[ERROR_TYPE] = type(exc).__qualname__
        elif done is not None and not done.ok:
            labels[ERROR_TYPE] = _chat_error_type(done.error or "")
        elif done is not None:
            if done.model:
                labels["gen_ai.response.model"] = done.model
            if done.finish_reason:
                span.set_attribute("gen_ai.response.finish_reasons", [done.finish_reason])
            for kind_, n in (("input", done.prompt_tokens), ("output", done.completion_tokens)):
                if n:  # the reply had usage
                    span.set_attribute(f"gen_ai.usage.{kind_}_tokens", n)
                    self.telemetry.chat_tokens.record(n, {**labels, "gen_ai.token.type": kind_})
        span.set_attributes(labels)
        if ERROR_TYPE in labels:
            span.set_status(StatusCode.ERROR)
        self.telemetry.chat_duration.record(time.perf_counter() - self.start, labels)
        span.end()
