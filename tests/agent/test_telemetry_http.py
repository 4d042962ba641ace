"""lazymem.agent.telemetry_http: the service's SERVER span per request, joining the caller's W3C trace and
giving its own back in `traceresponse`, the memory operations under it, and `http.server.request.duration`;
nothing when telemetry is off. Recorded into the SDK's in-memory exporter and reader
(tests/helpers_telemetry.py)."""

from __future__ import annotations

import json

import pytest
from fastapi.testclient import TestClient
from opentelemetry.trace import SpanKind

from lazymem.agent.entry import compose
from lazymem.agent.service import create_app
from lazymem.agent.settings import Settings
from lazymem.agent.tenants import Tenant, Tenants

from helpers_telemetry import KEY, PARENT_ID, TRACE_ID, TRACEPARENT, Recorded, http_client, only, rag_memory


@pytest.fixture(scope="module")
def memory(tmp_path_factory):
    with rag_memory(tmp_path_factory.mktemp("telemetry")) as m:
        yield m


@pytest.fixture
def recorded(memory):
    rec = Recorded(memory)
    yield rec
    rec.close()


@pytest.fixture
def http(memory, recorded):
    return http_client(memory)  # after `recorded`: the app traces its requests only if telemetry is on


def test_an_http_request_joins_the_callers_trace_and_says_its_own_in_traceresponse(http, recorded):
    body = {"messages": [{"role": "user", "text": "I keep bees."}]}
    reply = http.post("/v1/users/web-user/messages", json=body, headers={"traceparent": TRACEPARENT})
    assert reply.status_code == 201, reply.text
    server = only(recorded.finished("POST /v1/users/{user_id}/messages"))
    version, trace_id, span_id, flags = reply.headers["traceresponse"].split("-")
    assert (version, trace_id, flags) == ("00", TRACE_ID, "01")
    assert span_id == f"{server.context.span_id:016x}"
    assert server.kind is SpanKind.SERVER and f"{server.context.trace_id:032x}" == TRACE_ID
    assert f"{server.parent.span_id:016x}" == PARENT_ID and server.parent.is_remote
    assert server.attributes["http.route"] == "/v1/users/{user_id}/messages"
    assert server.attributes["http.request.method"] == "POST"
    assert server.attributes["http.response.status_code"] == 201
    add = only(recorded.finished("create_memory"))
    assert add.parent.span_id == server.context.span_id and add.context.trace_id == server.context.trace_id
    assert add.attributes["lazymem.tenant"] == "web"

    # without a traceparent: a trace of its own, whose id the reply gives back
    found = http.post("/v1/users/web-user/query", json={"question": "What do I keep?"})
    assert found.status_code == 200
    query = only(recorded.finished("POST /v1/users/{user_id}/query"))
    assert query.parent is None
    assert found.headers["traceresponse"].split("-")[1] == f"{query.context.trace_id:032x}"
    assert only(recorded.finished("search_memory")).parent.span_id == query.context.span_id

    # an error the app answers: a 404 is the client's (no error on the server span), the memory span has it
    assert http.post("/v1/users/nobody-web/query", json={"question": "x?"}).status_code == 404
    missing = recorded.finished("POST /v1/users/{user_id}/query")[-1]
    assert missing.attributes["http.response.status_code"] == 404 and "error.type" not in missing.attributes
    assert recorded.finished("search_memory")[-1].attributes["error.type"] == "unknown_user"
    # a path no route has: no route template, and the span is named by the method alone
    assert http.get("/v1/nowhere/web-user").status_code == 404
    assert only(recorded.finished("GET")).attributes.get("http.route") is None

    points = recorded.points("http.server.request.duration")
    routes = {(a.get("http.route"), a["http.response.status_code"]) for a, _ in points}
    assert routes == {
        ("/v1/users/{user_id}/messages", 201),
        ("/v1/users/{user_id}/query", 200),
        ("/v1/users/{user_id}/query", 404),
        (None, 404),
    }
    http.delete("/v1/users/web-user")


def test_an_export_streamed_over_http_is_one_span_under_the_request(http, recorded):
    three = {"messages": [{"role": "user", "text": f"n{i}"} for i in range(3)]}
    http.post("/v1/users/web-export/messages", json=three)
    lines = http.get("/v1/users/web-export/export?format=ndjson", headers={"traceparent": TRACEPARENT})
    assert len(lines.text.splitlines()) == 3
    export = only(recorded.finished("export_memory"))
    server = only(recorded.finished("GET /v1/users/{user_id}/export"))
    assert export.parent.span_id == server.context.span_id
    assert export.attributes["gen_ai.memory.record.count"] == 3
    assert f"{export.context.trace_id:032x}" == TRACE_ID
    ndjson = "\n".join(json.dumps({"role": "user", "text": f"i{i}", "source": f"i{i}"}) for i in range(2))
    reply = http.post("/v1/users/web-export/import", content=ndjson, headers={"traceparent": TRACEPARENT})
    assert reply.status_code == 201, reply.text
    upsert = only(recorded.finished("upsert_memory"))
    assert upsert.parent.span_id == only(recorded.finished("POST /v1/users/{user_id}/import")).context.span_id
    assert upsert.attributes["gen_ai.memory.record.count"] == 2
    http.delete("/v1/users/web-export")


def test_off_a_request_is_not_traced_and_its_reply_has_no_traceresponse(memory):
    assert not memory.telemetry.enabled
    app = create_app(memory, Tenants({KEY: Tenant("web")}), Settings.from_cfg(compose(["method=rag"])))
    reply = TestClient(app).get("/health", headers={"traceparent": TRACEPARENT})
    assert reply.status_code == 200 and "traceresponse" not in reply.headers
