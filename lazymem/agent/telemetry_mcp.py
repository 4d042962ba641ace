"""The MCP server's tool-call spans (OpenTelemetry): `trace_tool_calls` wraps the `tools/call` handler in a
SERVER span per call, child of the request's `params._meta` `traceparent` (MCP SEP-414), with
`mcp.server.operation.duration`.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from typing import Any

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.trace import SpanKind, StatusCode

from lazymem.agent.telemetry import ERROR_TYPE, OPERATION, Telemetry


def trace_tool_calls(telemetry: Telemetry, handler: Callable, tools: Mapping[str, Any]) -> Callable:
    """The low-level MCP server's `on_call_tool` handler, traced when `telemetry` is on: a SERVER span
    `tools/call {tool}` per call (semantic-conventions-genai docs/gen-ai/mcp.md, "Server"), child of the
    trace context in the request's `params._meta` (`traceparent`, `tracestate`: MCP SEP-414), and
    `mcp.server.operation.duration`. A tool not in `tools` is named in neither (a client chose that name).

    The handler gets `params: CallToolRequestParams`, whose `meta` is the request's `_meta` as a dict: the
    model's field `meta` (alias `_meta`) is a `RequestParamsMeta`, a TypedDict with `extra_items=Any`, so
    keys it does not declare, such as `traceparent`, come through as they were sent (mcp 2.3.0:
    mcp_types/_types.py:80 and :97; the runner also hands it over as `ctx.meta`, mcp/server/runner.py:99-107
    and :181-183, mcp/server/context.py:46)."""
    if not telemetry.enabled:
        return handler

    async def traced_call_tool(ctx, params):
        tool = params.name if params.name in tools else None
        labels: dict[str, Any] = {"mcp.method.name": "tools/call", OPERATION: "execute_tool"}
        if tool is not None:
            labels["gen_ai.tool.name"] = tool
        if isinstance(getattr(ctx, "protocol_version", None), str):
            labels["mcp.protocol.version"] = ctx.protocol_version
        attributes = dict(labels)
        if getattr(ctx, "request_id", None) is not None:
            attributes["jsonrpc.request.id"] = str(ctx.request_id)
        meta = params.meta if params.meta is not None else getattr(ctx, "meta", None)
        span = telemetry.tracer.start_span(
            "tools/call" + (f" {tool}" if tool else ""),
            context=telemetry.extract(meta if isinstance(meta, Mapping) else None),
            kind=SpanKind.SERVER,
            attributes=attributes,
            record_exception=False,
            set_status_on_exception=False,
        )
        start = time.perf_counter()
        token = otel_context.attach(trace.set_span_in_context(span))
        try:
            result = await handler(ctx, params)
        except BaseException as e:
            code = getattr(getattr(e, "error", None), "code", None)  # an MCPError: its JSON-RPC code
            labels[ERROR_TYPE] = str(code) if isinstance(code, int) else type(e).__qualname__
            if isinstance(code, int):
                span.set_attribute("rpc.response.status_code", str(code))
            raise
        else:
            if getattr(result, "is_error", False):  # a tool error: the conventions' `tool_error`
                labels[ERROR_TYPE] = "tool_error"
                code = (getattr(result, "structured_content", None) or {}).get("code")
                if isinstance(code, str):
                    span.set_attribute("lazymem.error.code", code)
            return result
        finally:
            otel_context.detach(token)
            span.set_attributes(labels)
            if ERROR_TYPE in labels:
                span.set_status(StatusCode.ERROR)
            telemetry.mcp_duration.record(time.perf_counter() - start, labels)
            span.end()

    return traced_call_tool
