"""What the tests of lazymem/agent/telemetry*.py share: a Memory of method=rag, a Telemetry recording into the
SDK's in-memory exporter and reader (`Recorded`), the service's app and MCP tool calls on that Memory, and a
caller's W3C trace context."""

from __future__ import annotations

from pathlib import Path

from fastapi.testclient import TestClient
from mcp import Client
from mcp.shared.exceptions import MCPError
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from lazymem.agent.entry import compose
from lazymem.agent.mcp_server import build_server
from lazymem.agent.memory import Memory
from lazymem.agent.service import create_app
from lazymem.agent.settings import Settings
from lazymem.agent.telemetry import Telemetry
from lazymem.agent.tenants import Tenant, Tenants

KEY = "key-telemetry-0123456789"
TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"
PARENT_ID = "00f067aa0ba902b7"
TRACEPARENT = f"00-{TRACE_ID}-{PARENT_ID}-01"


def rag_memory(tmp: Path) -> Memory:
    """A Memory under `tmp`: retrieval only (method=rag, the bundled MiniLM), telemetry off."""
    return Memory.from_config(["method=rag", f"agent.dir={tmp / 'data'}", f"paths.cache={tmp / 'cache'}"])


class Recorded:
    """A Telemetry into the SDK's in-memory exporter and reader, put on `memory` for one test."""

    def __init__(self, memory: Memory):
        self.spans, self.reader = InMemorySpanExporter(), InMemoryMetricReader()
        self.memory, self.was = memory, memory.telemetry
        memory.telemetry = Telemetry(self.spans, self.reader)

    def finished(self, name: str | None = None) -> list:
        return [s for s in self.spans.get_finished_spans() if name is None or s.name == name]

    def points(self, metric: str) -> list[tuple[dict, object]]:
        """(attributes, data point) of every point of `metric` collected so far (cumulative)."""
        self._data = self.reader.get_metrics_data() or getattr(self, "_data", None)
        found = []
        for rm in self._data.resource_metrics if self._data else ():
            for sm in rm.scope_metrics:
                for m in sm.metrics:
                    if m.name == metric:
                        found += [(dict(p.attributes), p) for p in m.data.data_points]
        return found

    def counted(self, operation: str) -> dict[str, int]:
        """lazymem.memory.records of `operation`, by outcome."""
        points = self.points("lazymem.memory.records")
        return {a["lazymem.outcome"]: p.value for a, p in points if a["gen_ai.operation.name"] == operation}

    def close(self) -> None:
        self.memory.telemetry.close()
        self.memory.telemetry = self.was


def only(spans: list):
    assert len(spans) == 1, [s.name for s in spans]
    return spans[0]


def http_client(memory: Memory) -> TestClient:
    """The service's app on `memory`, KEY a key of the tenant `web`; no lifespan: no loops, no close."""
    app = create_app(memory, Tenants({KEY: Tenant("web")}), Settings.from_cfg(compose(["method=rag"])))
    return TestClient(app, headers={"Authorization": f"Bearer {KEY}"})


async def mcp_calls(memory: Memory, calls: list[tuple[str, dict, dict | None]]) -> list:
    """Each call's result, or the MCPError (a protocol error) it raised."""
    replies = []
    async with Client(build_server(memory, "mcp", "mcp-user")) as client:
        for name, arguments, meta in calls:
            try:
                replies.append(await client.call_tool(name, arguments, meta=meta))
            except MCPError as e:
                replies.append(e)
    return replies
