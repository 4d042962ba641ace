"""lazymem.agent.telemetry_chat: the CLIENT span `chat {model}` of each model call a query makes, under the
query's span, with its gen_ai attributes, durations and token counts, and the low-cardinality `error.type` of
a failed call. The model calls go through the toy backend (tests/extension); recorded into the SDK's
in-memory exporter and reader (tests/helpers_telemetry.py)."""

from __future__ import annotations

from opentelemetry.trace import SpanKind, StatusCode

from lazymem.agent.memory import Memory
from lazymem.agent.telemetry_chat import _chat_error_type

from helpers import EXTENSION
from helpers_telemetry import Recorded, only


def test_a_query_through_a_model_traces_each_chat_call_under_its_span(tmp_path, monkeypatch, toy_modules):
    monkeypatch.syspath_prepend(str(EXTENSION))  # the toy backend: an OpenAI-compatible server in a thread
    overrides = [
        "llm=toy",
        "llm.common.toy.reply='[]'",
        f"hydra.searchpath=[file://{EXTENSION / 'conf'}]",
        f"agent.dir={tmp_path / 'data'}",
        f"paths.cache={tmp_path}",
    ]
    with Memory.from_config(overrides) as m:
        rec = Recorded(m)
        m.add("llm-user", [{"role": "user", "text": "I like tea."}, {"role": "user", "text": "I ski."}])
        m.query("llm-user", "What do I like?")
        chats = rec.finished("chat toy-1")
        query = only(rec.finished("search_memory"))
        assert chats and all(c.parent.span_id == query.context.span_id for c in chats)
        chat = chats[0]
        assert chat.kind is SpanKind.CLIENT and chat.status.status_code is StatusCode.UNSET
        assert chat.attributes["gen_ai.operation.name"] == "chat"
        assert chat.attributes["gen_ai.provider.name"] == "openai"
        assert chat.attributes["gen_ai.request.model"] == chat.attributes["gen_ai.response.model"] == "toy-1"
        assert chat.attributes["gen_ai.usage.input_tokens"] == 1
        assert chat.attributes["gen_ai.usage.output_tokens"] == 1
        assert chat.attributes["server.address"] == "127.0.0.1" and chat.attributes["server.port"] > 0
        assert chat.attributes["lazymem.llm.dialect"] == "toy"
        durations = rec.points("gen_ai.client.operation.duration")
        assert sum(p.count for _, p in durations) == len(chats)
        tokens = {a["gen_ai.token.type"]: p.sum for a, p in rec.points("gen_ai.client.token.usage")}
        assert tokens == {"input": len(chats), "output": len(chats)}
        rec.close()


def test_a_failed_chat_call_has_a_low_cardinality_error_type():
    assert _chat_error_type("HTTP 503: overloaded") == "503"
    assert _chat_error_type("timeout after 30s") == "timeout"
    assert _chat_error_type("connection error: refused") == "connection_error"
    assert _chat_error_type("empty completion (finish_reason=length)") == "empty_completion"
    assert _chat_error_type("something else") == "_OTHER"
