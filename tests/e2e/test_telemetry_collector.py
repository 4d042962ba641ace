"""`lazymem serve` with agent.telemetry on, exporting over OTLP/HTTP to a real OpenTelemetry collector (Rotel,
from the `rotel` wheel of the dev extra, printing what it receives): every memory operation of requests that
carry a W3C traceparent reaches the collector as a span of that trace, under the request's HTTP server span,
the metrics reach it too, the reply names the trace in `traceresponse`, and none of a message's text, a
question, the key or the user id is in anything the collector got. The service is stopped before the
collector's output is read: stopping flushes what the batch processor still holds. `lazymem mcp` does the
same for tool calls whose `params._meta` carries the traceparent."""

from __future__ import annotations

import asyncio
import importlib.resources
import json
import os
import re
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest
from mcp import ClientSession, StdioServerParameters, stdio_client

from agent_helpers import ROOT, Service, free_port

pytestmark = pytest.mark.slow

KEY = "key-collector-0123456789"
USER = "collector-user-5e1b"  # a canary: in the request path only
TEXT = "collector canary text a8f0"
QUESTION = "collector canary question 77c3"
TRACE_ID = "0af7651916cd43dd8448eb211c80319c"
PARENT_ID = "b7ad6b7169203331"
# Rotel's debug output of a span: "Trace ID : <hex>", "Parent ID : <hex>", "ID : <hex>", "Name : <name>"
SPAN = re.compile(
    r"Trace ID\s+: ([0-9a-f]{32})\n\s*Parent ID\s+: ([0-9a-f]*)\n\s*ID\s+: [0-9a-f]+\n\s*Name\s+: (.+)"
)
METRIC = re.compile(r"-> Name: (\S+)")


def rotel_agent() -> Path:
    try:
        agent = Path(str(importlib.resources.files("rotel") / "rotel-agent"))
    except ModuleNotFoundError:
        pytest.skip("the rotel wheel is not installed (pip install -e '.[dev]' installs it)")
    if not agent.is_file() or not os.access(agent, os.X_OK):
        pytest.skip(f"{agent} is missing or not executable: reinstall the rotel wheel")
    return agent


class Collector:
    """Rotel on free local ports, printing every span and metric it receives to `out`."""

    def __init__(self, tmp: Path):
        self.port, grpc = free_port(), free_port()
        self.out = tmp / "rotel.out"
        args = [
            str(rotel_agent()),
            "start",
            f"--otlp-http-endpoint=127.0.0.1:{self.port}",
            f"--otlp-grpc-endpoint=127.0.0.1:{grpc}",
            "--exporter=blackhole",
            "--debug-log=traces",
            "--debug-log=metrics",
            "--debug-log-verbosity=detailed",
            f"--pid-file={tmp / 'rotel.pid'}",
            f"--log-file={tmp / 'rotel.log'}",
        ]
        with open(self.out, "wb") as out:
            self.proc = subprocess.Popen(args, stdout=out, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 15
        while True:
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=0.5).close()
                return
            except OSError:
                if self.proc.poll() is not None or time.monotonic() > deadline:
                    self.stop()
                    raise RuntimeError(f"rotel did not start:\n{self.text()[-2000:]}") from None
                time.sleep(0.1)

    def text(self) -> str:
        return self.out.read_text(errors="replace")

    def spans(self) -> list[tuple[str, str, str]]:
        """(trace id, parent span id, name) of every span received so far."""
        return [(t, p, n.strip()) for t, p, n in SPAN.findall(self.text())]

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def test_the_service_sends_each_operation_as_a_span_of_the_callers_trace_to_a_collector(tmp_path):
    collector = Collector(tmp_path)
    try:
        svc = Service(
            tmp_path,
            "method=rag",
            "agent.telemetry.enabled=true",
            f"agent.telemetry.endpoint=http://127.0.0.1:{collector.port}",
            "agent.telemetry.metrics_every_s=1",
            env={"LAZYMEM_API_KEYS": f"{KEY}=t"},
        )
        try:
            headers = {"Authorization": f"Bearer {KEY}", "traceparent": f"00-{TRACE_ID}-{PARENT_ID}-01"}
            with httpx.Client(base_url=svc.url, headers=headers, timeout=120) as c:
                base = f"/v1/users/{USER}"
                two = {"messages": [{"role": "user", "text": TEXT}, {"role": "user", "text": "I keep bees."}]}
                added = c.post(f"{base}/messages", json=two)
                assert added.status_code == 201, added.text
                assert added.headers["traceresponse"].startswith(f"00-{TRACE_ID}-")
                assert c.post(f"{base}/query", json={"question": QUESTION}).status_code == 200
                forget = {"message_ids": added.json()["ids"][:1]}
                assert c.post(f"{base}/forget", json=forget).json() == {"deleted": 1}
                line = json.dumps({"role": "user", "text": "imported", "source": "c:1"})
                assert c.post(f"{base}/import", content=line).status_code == 201
                assert len(c.get(f"{base}/export").json()["messages"]) == 2
                assert c.delete(base).json() == {"deleted": 2}
                alone = c.get("/health", headers={"traceparent": ""})  # a trace of its own, named back
                own_trace = alone.headers["traceresponse"].split("-")[1]
        finally:
            svc.stop()  # SIGTERM: the service closes its memory, which flushes the telemetry
        deadline = time.monotonic() + 20
        wanted = {
            "create_memory",
            "search_memory",
            "upsert_memory",
            "export_memory",
            "DELETE /v1/users/{user_id}",
        }
        while (
            not wanted <= {n for t, _, n in collector.spans() if t == TRACE_ID}
            and time.monotonic() < deadline
        ):
            time.sleep(0.2)
    finally:
        collector.stop()

    spans = collector.spans()
    ours = [(parent, name) for trace, parent, name in spans if trace == TRACE_ID]
    names = sorted(name for _, name in ours)
    assert names == sorted(
        [
            "create_memory",
            "search_memory",
            "delete_memory",
            "upsert_memory",
            "export_memory",
            "delete_memory",
            "POST /v1/users/{user_id}/messages",
            "POST /v1/users/{user_id}/query",
            "POST /v1/users/{user_id}/forget",
            "POST /v1/users/{user_id}/import",
            "GET /v1/users/{user_id}/export",
            "DELETE /v1/users/{user_id}",
        ]
    ), names
    assert {parent for parent, name in ours if " " in name} == {PARENT_ID}  # the server spans: the caller's
    assert (own_trace, "", "GET /health") in spans
    text = collector.text()
    assert "-> gen_ai.operation.name: Str(search_memory)" in text
    assert "-> http.route: Str(/v1/users/{user_id}/query)" in text
    assert {
        "lazymem.memory.operation.duration",
        "lazymem.memory.records",
        "http.server.request.duration",
    } <= set(METRIC.findall(text))
    for canary in (USER, TEXT, QUESTION, KEY):
        assert canary not in text, canary
    assert "telemetry: could not export" not in svc.log.read_text()


def test_lazymem_mcp_sends_its_tool_calls_as_spans_of_the_trace_in_their_meta(tmp_path):
    collector = Collector(tmp_path)
    try:
        args = [
            "-m",
            "lazymem.run",
            "mcp",
            "method=rag",
            f"agent.dir={tmp_path / 'data'}",
            f"paths.cache={tmp_path / 'cache'}",
            "agent.telemetry.enabled=true",
            f"agent.telemetry.endpoint=http://127.0.0.1:{collector.port}",
        ]
        params = StdioServerParameters(command=sys.executable, args=args, cwd=str(ROOT))
        meta = {"traceparent": f"00-{TRACE_ID}-{PARENT_ID}-01"}

        async def calls() -> None:
            async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
                await session.initialize()
                stored = await session.call_tool("remember", {"text": TEXT, "user_id": USER}, meta=meta)
                assert not stored.is_error, stored.content
                found = await session.call_tool("recall", {"question": QUESTION, "user_id": USER}, meta=meta)
                assert not found.is_error, found.content
                await session.call_tool("forget_all", {"user_id": USER}, meta=meta)
            # leaving stdio_client closes the server's stdin: it ends, closing its memory (a flush)

        asyncio.run(calls())
        deadline = time.monotonic() + 20
        while len([t for t, _, _ in collector.spans() if t == TRACE_ID]) < 6 and time.monotonic() < deadline:
            time.sleep(0.2)
    finally:
        collector.stop()
    ours = [(parent, name) for trace, parent, name in collector.spans() if trace == TRACE_ID]
    assert sorted(name for _, name in ours) == sorted(
        [
            "tools/call remember",
            "create_memory",
            "tools/call recall",
            "search_memory",
            "tools/call forget_all",
            "delete_memory",
        ]
    )
    assert {parent for parent, name in ours if name.startswith("tools/call")} == {PARENT_ID}
    text = collector.text()
    assert "mcp.server.operation.duration" in METRIC.findall(text)
    for canary in (USER, TEXT, QUESTION):
        assert canary not in text, canary
