"""The routes in process (FastAPI's TestClient) over a stand-in memory: what each route hands the memory it
finds on the app (the caller's tenant, the body, the import's line numbers), and how what the memory raises
comes back. tests/agent/test_service.py drives the same routes through `lazymem serve` over real HTTP."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest
from fastapi.testclient import TestClient

from lazymem.agent.entry import compose
from lazymem.agent.errors import StoreUnavailable, UnknownUser
from lazymem.agent.inputs import Limits
from lazymem.agent.moving import Imported
from lazymem.agent.routes import bounded, router
from lazymem.agent.service import create_app
from lazymem.agent.settings import Settings
from lazymem.agent.telemetry import Telemetry
from lazymem.agent.tenants import Tenant, Tenants
from lazymem.construct.processor import StageError

KEYS = {"key-a-0123456789": Tenant("a"), "key-b-0123456789": Tenant("b")}
A = {"Authorization": "Bearer key-a-0123456789"}


class StandIn:
    """The part of Memory the routes call, recording each call; `fail` is raised by the next query."""

    def __init__(self):
        self.calls: list[tuple] = []
        self.limits = Limits(max_messages_per_add=2)
        self.method = SimpleNamespace(name="rag")
        self.fail: Exception | None = None
        self.telemetry = Telemetry()  # off
        self.reembedding = SimpleNamespace(status=lambda: {"state": "idle"})

    async def aadd(self, user_id, messages, *, tenant, idempotency_key=None):
        self.calls.append(("add", tenant, user_id, messages, idempotency_key))
        return list(range(1, len(messages) + 1))

    async def aquery(self, user_id, question, now=None, *, tenant):
        self.calls.append(("query", tenant, user_id, question, now))
        if self.fail is not None:
            raise self.fail
        recall = {"text": "t", "style": "raw", "messages": [], "tokens": 1, "timings": {"total": 0.1}}
        return SimpleNamespace(to_dict=lambda: recall)

    async def aforget_all(self, user_id, *, tenant):
        self.calls.append(("forget_all", tenant, user_id))
        return 3

    async def aimport(self, user_id, batch, *, tenant, batch_size, where):
        if self.fail is not None and self.calls:  # from the second batch on
            raise self.fail
        self.calls.append(
            ("import", tenant, user_id, [m["text"] for m in batch], [where(i) for i in range(len(batch))])
        )
        return Imported(stored=len(batch))


@pytest.fixture(scope="module")
def settings():
    return Settings.from_cfg(compose(["method=rag"]))


@pytest.fixture
def app(settings):
    memory = StandIn()
    app = create_app(memory, Tenants(KEYS), settings)  # no lifespan here: the background loops stay idle
    return app, memory, TestClient(app)


def test_a_route_calls_the_apps_memory_as_the_tenant_of_the_callers_key(app):
    _, memory, client = app
    body = {"messages": [{"role": "user", "text": "hi"}]}
    r = client.post("/v1/users/ann/messages", json=body, headers={**A, "Idempotency-Key": "k1"})
    assert r.status_code == 201 and r.json() == {"ids": [1]}
    b = {"Authorization": "Bearer key-b-0123456789"}
    assert client.delete("/v1/users/ann", headers=b).json() == {"deleted": 3}
    assert memory.calls == [
        ("add", "a", "ann", [{"role": "user", "text": "hi"}], "k1"),
        ("forget_all", "b", "ann"),
    ]


@pytest.mark.parametrize("headers", [{}, {"Authorization": "Bearer nobody-0123456789"}])
def test_without_a_known_key_no_route_reaches_the_memory(app, headers):
    _, memory, client = app
    r = client.post("/v1/users/ann/query", json={"question": "q"}, headers=headers)
    assert r.status_code == 401 and r.json()["code"] == "unauthorized"
    assert memory.calls == []


def test_what_the_memory_raises_comes_back_as_its_code(app):
    _, memory, client = app
    memory.fail = UnknownUser("ann")
    r = client.post("/v1/users/ann/query", json={"question": "q"}, headers=A)
    assert r.status_code == 404 and r.json()["code"] == "unknown_user"
    memory.fail = StageError("the prompt said SECRET")
    r = client.post("/v1/users/ann/query", json={"question": "q"}, headers=A)
    assert r.status_code == 502 and r.json() == {
        "code": "model_failed",
        "detail": "the memory model failed; try again",
    }
    memory.fail = None
    assert (
        client.post("/v1/users/ann/query", json={"question": "q", "now": "May"}, headers=A).json()["text"]
        == "t"
    )


def test_an_import_goes_in_batches_of_an_adds_size_naming_each_messages_line(app):
    _, memory, client = app
    lines = [json.dumps({"role": "user", "text": t}) for t in ("one", "two", "three")]
    body = "\n".join([lines[0], "", lines[1], lines[2]])  # a blank line is skipped but counted
    r = client.post(
        "/v1/users/ann/import", content=body, headers={**A, "Content-Type": "application/x-ndjson"}
    )
    assert r.status_code == 201 and r.json() == {"stored": 3, "skipped": 0, "forgotten": 0}
    assert memory.calls == [
        ("import", "a", "ann", ["one", "two"], ["line 1", "line 3"]),
        ("import", "a", "ann", ["three"], ["line 4"]),
    ]


def test_a_line_that_is_not_an_object_stops_the_import_keeping_the_batches_before_it(app):
    _, memory, client = app
    lines = [json.dumps({"role": "user", "text": t}) for t in ("one", "two")] + ["[1]"]
    r = client.post("/v1/users/ann/import", content="\n".join(lines), headers=A)
    assert r.status_code == 400 and r.json()["stored"] == 2
    assert r.json()["detail"].startswith("line 3 is not a JSON object")


def test_a_line_nested_too_deep_is_a_400_naming_it_not_a_500(app):
    _, memory, client = app
    deep = "[" * 100_000 + "]" * 100_000
    body = "\n".join([json.dumps({"role": "user", "text": "one"}), deep])
    r = client.post("/v1/users/ann/import", content=body, headers=A)
    assert r.status_code == 400 and r.json()["code"] == "bad_input"
    assert r.json()["detail"].startswith("line 2 is JSON nested too deep") and r.json()["stored"] == 0


def test_the_store_going_away_during_an_import_is_a_503_that_says_what_was_stored(app):
    _, memory, client = app
    memory.fail = StoreUnavailable("PostgreSQL at db.internal:5432/x: no connection within 3s")
    lines = [json.dumps({"role": "user", "text": t}) for t in ("one", "two", "three")]
    r = client.post("/v1/users/ann/import", content="\n".join(lines), headers=A)
    assert r.status_code == 503 and r.headers["retry-after"] == "1"
    assert r.json()["code"] == "store_unavailable" and r.json()["stored"] == 2  # the first batch is kept
    assert "2 messages of this import stored before it" in r.json()["detail"]
    assert "db.internal" not in r.text  # the database's address stays in the service's log


def test_two_idempotency_key_headers_are_refused_and_nothing_is_stored(app):
    _, memory, client = app
    body = {"messages": [{"role": "user", "text": "hi"}]}
    twice = [("Authorization", A["Authorization"]), ("Idempotency-Key", "k1"), ("Idempotency-Key", "k2")]
    r = client.post("/v1/users/ann/messages", json=body, headers=twice)
    assert r.status_code == 400 and r.json()["code"] == "bad_input"
    assert "more than one Idempotency-Key" in r.json()["detail"] and memory.calls == []


def test_the_router_holds_every_route_and_the_app_serves_them(app):
    paths = {(route.path, method) for route in router.routes for method in route.methods}
    assert paths == {
        ("/health", "GET"),
        ("/ready", "GET"),
        ("/v1/users/{user_id}/messages", "POST"),
        ("/v1/users/{user_id}/query", "POST"),
        ("/v1/users/{user_id}/forget", "POST"),
        ("/v1/users/{user_id}", "DELETE"),
        ("/v1/users/{user_id}/export", "GET"),
        ("/v1/users/{user_id}/import", "POST"),
    }
    _, _, client = app
    health = client.get("/health").json()
    assert health["status"] == "ok" and health["method"] == "rag"
    assert set(client.get("/openapi.json").json()["paths"]) == {p for p, _ in paths}


def test_a_detail_is_bounded():
    assert bounded("x" * 10) == "x" * 10
    long = bounded("y" * 2000)
    assert len(long) == 500 and long.endswith("...")
