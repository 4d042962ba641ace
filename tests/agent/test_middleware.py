"""The service's middleware (lazymem/agent/middleware.py) on a small FastAPI app: body limits per route,
paths that are not UTF-8 once decoded, and access log lines without their query string."""

from __future__ import annotations

import logging

from fastapi import FastAPI, Request
from fastapi.testclient import TestClient

from lazymem.agent.middleware import BodyLimit, RedactQuery, ValidPath, log_config


def client() -> TestClient:
    app = FastAPI()
    app.add_middleware(BodyLimit, max_bytes=10, max_import_bytes=100)
    app.add_middleware(ValidPath)

    @app.post("/users/{user}/messages")
    @app.post("/users/{user}/import")
    async def echo(user: str, request: Request) -> dict:
        return {"user": user, "bytes": len(await request.body())}

    return TestClient(app)


def test_bodies_over_their_route_limit_get_413():
    c = client()
    assert c.post("/users/u/messages", content=b"x" * 10).json() == {"user": "u", "bytes": 10}
    r = c.post("/users/u/messages", content=b"x" * 11)
    assert r.status_code == 413 and "serve.max_body_bytes" in r.json()["detail"]
    assert c.post("/users/u/import", content=b"x" * 100).status_code == 200
    r = c.post("/users/u/import", content=b"x" * 101)
    assert r.status_code == 413 and "serve.max_import_bytes" in r.json()["detail"]


def test_paths_that_are_not_utf8_once_decoded_are_refused():
    c = client()
    for raw in ("%FE", "%FF", "a%C3"):
        r = c.post(f"/users/{raw}/messages", content=b"{}")
        assert r.status_code == 400 and "not valid UTF-8" in r.json()["detail"]
    assert c.post("/users/%C3%A9/messages", content=b"").json()["user"] == "é"


def test_access_lines_lose_their_query_string():
    record = logging.LogRecord(
        "uvicorn.access", logging.INFO, "", 0, '%s - "%s %s HTTP/%s" %d',
        ("127.0.0.1:5", "GET", "/v1/users/a/export?api_key=SECRET", "1.1", 401), None,
    )  # fmt: skip
    assert RedactQuery().filter(record)
    assert record.getMessage() == '127.0.0.1:5 - "GET /v1/users/a/export?[redacted] HTTP/1.1" 401'
    plain = logging.LogRecord(
        "uvicorn.access", logging.INFO, "", 0, "%s %s %s", ("a", "GET", "/health"), None
    )
    RedactQuery().filter(plain)
    assert plain.getMessage() == "a GET /health"
    config = log_config()
    assert config["handlers"]["access"]["filters"] == ["redact_query"]
