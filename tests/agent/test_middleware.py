"""The service's middleware (lazymem/agent/middleware.py) on a small FastAPI app: body limits per route,
paths that are not UTF-8 once decoded; and its log filter on log records as uvicorn and lazymem make them:
no query string and no API key in any line (a real server's log: tests/agent/test_http_server.py)."""

from __future__ import annotations

import logging
import logging.config

from fastapi import FastAPI, Request
from fastapi.testclient import TestClient

from lazymem.agent.middleware import REQUEST_KEY, BodyLimit, RedactKeys, ValidPath, log_config
from lazymem.agent.tenants import Tenant, Tenants


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
    assert r.status_code == 413 and r.json()["code"] == "too_large"
    assert "serve.max_body_bytes" in r.json()["detail"]
    assert c.post("/users/u/import", content=b"x" * 100).status_code == 200
    r = c.post("/users/u/import", content=b"x" * 101)
    assert r.status_code == 413 and "serve.max_import_bytes" in r.json()["detail"]


def test_paths_that_are_not_utf8_once_decoded_are_refused():
    c = client()
    for raw in ("%FE", "%FF", "a%C3"):
        r = c.post(f"/users/{raw}/messages", content=b"{}")
        assert (
            r.status_code == 400
            and r.json()["code"] == "bad_input"
            and "not valid UTF-8" in r.json()["detail"]
        )
    assert c.post("/users/%C3%A9/messages", content=b"").json()["user"] == "é"


def access(target: str, method: str = "GET") -> logging.LogRecord:
    """An access line as uvicorn logs it (uvicorn/protocols/http/h11_impl.py:472-480)."""
    args = ("127.0.0.1:5", method, target, "1.1", 401)
    return logging.LogRecord("uvicorn.access", logging.INFO, "", 0, '%s - "%s %s HTTP/%s" %d', args, None)


KEYS = Tenants({"c2VjcmV0K2tleS8=": Tenant("a"), "key-b-0123456789": Tenant("b")})


def test_access_lines_lose_their_query_string_and_every_key():
    record = access("/v1/users/a/export?api_key=SECRET")
    assert RedactKeys().filter(record)
    assert record.getMessage() == '127.0.0.1:5 - "GET /v1/users/a/export?[redacted] HTTP/1.1" 401'
    record = access("/v1/users/c2VjcmV0K2tleS8%3d/query")
    RedactKeys(KEYS).filter(record)
    assert record.getMessage() == '127.0.0.1:5 - "GET /v1/users/[redacted]/query HTTP/1.1" 401'
    record = access("/health", method="key-b-0123456789")  # any token may stand as the method
    RedactKeys(KEYS).filter(record)
    assert record.getMessage() == '127.0.0.1:5 - "[redacted] /health HTTP/1.1" 401'
    assert len(record.args) == 5  # uvicorn's AccessFormatter unpacks five


def test_a_path_segment_equal_to_the_requests_own_token_is_redacted_though_no_key():
    token = REQUEST_KEY.set("wrong-key-42")
    try:
        record = access("/v1/users/wrong-%6Bey-42/query")
        RedactKeys(KEYS).filter(record)
        assert record.getMessage() == '127.0.0.1:5 - "GET /v1/users/[redacted]/query HTTP/1.1" 401'
        record = access("/v1/users/wrong-key-421/query")  # only a whole segment
        RedactKeys(KEYS).filter(record)
        assert "wrong-key-421" in record.getMessage()
    finally:
        REQUEST_KEY.reset(token)


def test_trace_lines_lose_the_scopes_query_and_keys():
    scope = {
        "type": "http",
        "path": "/v1/users/key-b-0123456789/q",
        "raw_path": b"/v1/users/key-b-0123456789/q",
    }
    scope["query_string"] = b"key=c2VjcmV0K2tleS8%3D"
    record = logging.LogRecord("uvicorn.asgi", 5, "", 0, "%s [%d] Started scope=%s", ("ASGI", 1, scope), None)
    RedactKeys(KEYS).filter(record)
    message = record.getMessage()
    assert "key-b-0123456789" not in message and "c2VjcmV0K2tleS8" not in message
    assert "'path': '/v1/users/[redacted]/q'" in message and "'query_string': b'[redacted]'" in message
    assert scope["query_string"] == b"key=c2VjcmV0K2tleS8%3D"  # what the app sees is untouched


def test_messages_and_tracebacks_lose_their_keys():
    try:
        raise RuntimeError("failed on /v1/users/key-b-0123456789/query")
    except RuntimeError as e:
        exc_info = (type(e), e, e.__traceback__)
    record = logging.LogRecord(
        "lazymem.agent.service", logging.ERROR, "", 0, "failed on %s", ("/u/c2VjcmV0K2tleS8=",), exc_info
    )
    record.color_message = "failed on \x1b[1m%s\x1b[0m"
    RedactKeys(KEYS).filter(record)
    text = logging.Formatter().format(record)
    assert text.startswith("failed on /u/[redacted]\nTraceback") and "key-b-0123456789" not in text
    assert text.endswith("RuntimeError: failed on /v1/users/[redacted]/query")
    assert "color_message" not in record.__dict__
    plain = logging.LogRecord("lazymem", logging.INFO, "", 0, "indexed %d users", (3,), None)
    RedactKeys(KEYS).filter(plain)
    assert (plain.msg, plain.args) == ("indexed %d users", (3,))


def test_a_line_that_cannot_be_cleaned_is_dropped():
    class Broken:
        def redact(self, text):
            raise RuntimeError("no")

    assert not RedactKeys(Broken()).filter(logging.LogRecord("x", logging.INFO, "", 0, "line", (), None))


def test_log_config_filters_every_handler_and_writes_the_lazymem_loggers():
    config = log_config("debug", KEYS)
    assert config["filters"]["redact_keys"] == {"()": RedactKeys, "keys": KEYS}
    assert all(h["filters"] == ["redact_keys"] for h in config["handlers"].values())
    assert config["loggers"]["lazymem"] == {
        "handlers": ["default"],
        "level": logging.DEBUG,
        "propagate": False,
    }
    assert log_config("trace")["loggers"]["lazymem"]["level"] == 5
    # dictConfig hands the filter its keys as they are (its converting dicts leave objects alone)
    configurator = logging.config.DictConfigurator(log_config("info", KEYS))
    built = configurator.configure_filter(configurator.config["filters"]["redact_keys"])
    assert isinstance(built, RedactKeys) and built.keys is KEYS
