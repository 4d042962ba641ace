"""lazymem.agent.telemetry_mcp: a SERVER span per MCP `tools/call`, joining the trace in the request's
`params._meta`, the memory operations under it, tool and protocol errors, and
`mcp.server.operation.duration`; the handler left as it is when telemetry is off. Through the MCP SDK's
in-process client; recorded into the SDK's in-memory exporter and reader (tests/helpers_telemetry.py)."""

from __future__ import annotations

import asyncio

import pytest
from mcp.shared.exceptions import MCPError
from opentelemetry.trace import SpanKind, StatusCode

from lazymem.agent.telemetry_mcp import trace_tool_calls

from helpers_telemetry import PARENT_ID, TRACE_ID, TRACEPARENT, Recorded, mcp_calls, only, rag_memory


@pytest.fixture(scope="module")
def memory(tmp_path_factory):
    with rag_memory(tmp_path_factory.mktemp("telemetry")) as m:
        yield m


@pytest.fixture
def recorded(memory):
    rec = Recorded(memory)
    yield rec
    rec.close()


def test_an_mcp_tool_call_joins_the_trace_in_its_meta(memory, recorded):
    meta = {"traceparent": TRACEPARENT, "tracestate": "congo=t61rcWkgMzE"}
    remembered, unknown, missing = asyncio.run(
        mcp_calls(
            memory,
            [
                ("remember", {"text": "My cat is Tom."}, meta),
                ("recall", {"question": "cat?", "user_id": "nobody-mcp"}, None),
                ("no_such_tool", {}, None),
            ],
        )
    )
    assert not remembered.is_error and unknown.is_error and isinstance(missing, MCPError)
    server = only(recorded.finished("tools/call remember"))
    assert server.kind is SpanKind.SERVER and f"{server.context.trace_id:032x}" == TRACE_ID
    assert f"{server.parent.span_id:016x}" == PARENT_ID and server.parent.is_remote
    assert server.context.trace_state.get("congo") == "t61rcWkgMzE"
    attributes = dict(server.attributes)
    assert attributes.pop("jsonrpc.request.id").isdigit()
    assert attributes.pop("mcp.protocol.version")
    assert attributes == {
        "mcp.method.name": "tools/call",
        "gen_ai.tool.name": "remember",
        "gen_ai.operation.name": "execute_tool",
    }
    add = only(recorded.finished("create_memory"))
    assert add.parent.span_id == server.context.span_id and add.attributes["lazymem.tenant"] == "mcp"

    failed = only(recorded.finished("tools/call recall"))  # no _meta: a trace of its own
    assert failed.parent is None and failed.status.status_code is StatusCode.ERROR
    assert failed.attributes["error.type"] == "tool_error"
    assert failed.attributes["lazymem.error.code"] == "unknown_user"
    assert only(recorded.finished("search_memory")).attributes["error.type"] == "unknown_user"
    stray = only(recorded.finished("tools/call"))  # a tool the server does not have: not named
    assert "gen_ai.tool.name" not in stray.attributes and stray.attributes["error.type"] == "-32602"

    labels = [a for a, _ in recorded.points("mcp.server.operation.duration")]
    assert {(a.get("gen_ai.tool.name"), a.get("error.type")) for a in labels} == {
        ("remember", None),
        ("recall", "tool_error"),
        (None, "-32602"),
    }
    asyncio.run(mcp_calls(memory, [("forget_all", {}, None)]))


def test_off_the_tool_handler_is_left_as_it_is(memory):
    assert not memory.telemetry.enabled

    async def handler(ctx, params):
        return None

    assert trace_tool_calls(memory.telemetry, handler, {}) is handler
