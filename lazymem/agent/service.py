"""`lazymem serve`: the Memory API over HTTP (FastAPI under uvicorn), one tenant per API key.

    lazymem serve [overrides]     # e.g. method=rag serve.port=9000 agent.dir=/srv/lazymem

Endpoints (OpenAPI page at /docs, schema at /openapi.json); every /v1 call needs `Authorization: Bearer KEY`
and only ever reaches the users of that key's tenant:
  POST   /v1/users/{user_id}/messages  {"messages": [{"role", "text", "time"?, "session_id"?}]} -> {"ids"}
                                       (header Idempotency-Key?: a retry with it is stored once)
  POST   /v1/users/{user_id}/query     {"question", "now"?} -> the memory block, kept messages, tokens,
                                       timings
  POST   /v1/users/{user_id}/forget    {"message_ids": [...]} -> {"deleted"}
  DELETE /v1/users/{user_id}           every message of the user -> {"deleted"}
  GET    /v1/users/{user_id}/export    ?vectors=true? ?format=ndjson? -> {"user_id", "messages"} (or NDJSON)
  POST   /v1/users/{user_id}/import    NDJSON, a message per line (+ "source"?, "vectors"?) -> {"stored",
                                       "skipped", "forgotten"}
  GET    /health (liveness: the process answers), GET /ready (readiness: the store answers, 503 if not)

Every error is `{"code", "detail"}` with one code per kind of error (lazymem/agent/errors.py, the same codes
as the Python exceptions and the MCP tool errors); a 503 `store_unavailable` carries Retry-After.

Keys come from `serve.keys_file` (YAML, tenant -> keys and retention) and the environment variable named
by `serve.keys_env` (lazymem/agent/tenants.py; SIGHUP reads them again); no log line carries one, wherever
a client put it (lazymem/agent/middleware.py). Questions travel in POST bodies, so no message text or
question reaches an access log line. The config is checked once at start-up as every task's is (the
settings, lazymem.validate, and preflight for the roles the method calls: lazymem/agent/entry.py), and
uvicorn runs with a request-head timeout and refuses ambiguous framing (lazymem/agent/http_server.py).
A tenant's `retention_days` is enforced by a purge at start-up and every `serve.purge_every_s`, and the
store's maintenance step (which makes deletions final in its files) runs every `serve.maintain_every_s`
(lazymem/agent/background.py); /health says when each last succeeded. The routes and their bodies are
in lazymem/agent/routes.py; this module builds the app around them.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Sequence

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from lazymem.agent import http_server
from lazymem.agent.background import Indexer, Maintenance, Reembed, Refresh, Retention
from lazymem.agent.entry import load
from lazymem.agent.errors import AgentError, BadInput, ModelFailed, StoreUnavailable
from lazymem.agent.memory import Memory
from lazymem.agent.middleware import BodyLimit, ValidPath
from lazymem.agent.routes import bounded, router
from lazymem.agent.settings import Settings, one_line
from lazymem.agent.telemetry_http import FASTAPI_TELEMETRY_OFF, HttpTelemetry
from lazymem.agent.tenants import Tenants
from lazymem.construct.processor import StageError
from lazymem.validate import ConfigError

log = logging.getLogger(__name__)

# what a route-level HTTP status means, as an error code
_HTTP_CODES = {
    400: "bad_input",  # a body FastAPI could not parse (bytes that are not UTF-8, JSON nested too deep)
    401: "unauthorized",
    404: "not_found",
    405: "method_not_allowed",
    413: "too_large",
}


def create_app(memory: Memory, tenants: Tenants, settings: Settings) -> FastAPI:
    """The service around `memory` under `settings` (lazymem/agent/settings.py); it closes `memory` when it
    shuts down. The routes (lazymem/agent/routes.py) find `memory`, `tenants` and `settings` on
    `app.state`, and /health the status of the retention and maintenance loops."""
    s = settings.serve
    app = FastAPI(
        title="LazyMem",
        summary="Query-time memory construction for agents",
        lifespan=lifespan,
        telemetry=FASTAPI_TELEMETRY_OFF,
    )
    app.add_middleware(BodyLimit, max_bytes=s.max_body_bytes, max_import_bytes=s.max_import_bytes)
    app.add_middleware(ValidPath)
    if memory.telemetry.enabled:  # outermost: it sees the replies of the two above too
        app.add_middleware(HttpTelemetry, telemetry=memory.telemetry)
    app.state.memory, app.state.tenants, app.state.settings = memory, tenants, settings
    app.state.retention = Retention(memory, lambda: tenants.all.values(), s.purge_every_s, s.purge_retry_s)
    app.state.maintenance = Maintenance(memory, s.maintain_every_s)
    app.state.reembed = Reembed(memory, s.index_every_s)  # after a change of encoder; in /health
    app.state.loops = [
        app.state.retention,
        app.state.maintenance,
        Refresh(memory, s.refresh_every_s),
        Indexer(memory, s.index_every_s, settings.agent.index_lease_s),
        app.state.reembed,
    ]
    app.add_exception_handler(RequestValidationError, invalid)
    app.add_exception_handler(AgentError, agent_error)
    app.add_exception_handler(StageError, model_failed)
    app.add_exception_handler(StarletteHTTPException, http_error)
    app.include_router(router)
    return app


@contextlib.asynccontextmanager
async def lifespan(app: FastAPI):
    """Run the app's background loops while it serves; then stop them and close its memory."""
    tasks = [asyncio.create_task(loop.run()) for loop in app.state.loops]
    try:
        yield
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.to_thread(app.state.memory.close)


# ---- exception handlers: every error reply is `{"code", "detail"}`


async def invalid(request: Request, exc: RequestValidationError) -> JSONResponse:
    return error_reply(BadInput(_validation_message(request, exc.errors())))


async def agent_error(request: Request, exc: AgentError) -> JSONResponse:
    return error_reply(exc)


async def model_failed(request: Request, exc: StageError) -> JSONResponse:
    log.error("memory model failed on %s", request.url.path)  # its message may quote the prompt
    return error_reply(ModelFailed("the memory model failed; try again"))


async def http_error(request: Request, exc: StarletteHTTPException) -> JSONResponse:
    code = _HTTP_CODES.get(exc.status_code, "error")
    return JSONResponse(
        {"code": code, "detail": bounded(str(exc.detail))}, exc.status_code, headers=exc.headers
    )


def error_reply(exc: AgentError) -> JSONResponse:
    """An AgentError as its HTTP reply: its status, `{"code", "detail"}`, Retry-After on a 503. What the
    store said stays in the service's log: it names the database's address, no business of a client's."""
    headers, detail = None, bounded(str(exc))
    if isinstance(exc, StoreUnavailable):
        headers = {"Retry-After": exc.retry_after_header()}
        log.warning("store unavailable: %s", exc)
        detail = "the memory store is not reachable now; retry after Retry-After seconds (an add: same key)"
    return JSONResponse({"code": exc.code, "detail": detail}, exc.status, headers=headers)


def _validation_message(request: Request, errors: Sequence[dict]) -> str:
    """FastAPI's validation errors as one line, e.g. `body.messages[0].text: Field required`; a forget
    without its ids also names the route that deletes everything."""
    parts = []
    for e in errors[:5]:
        if e["type"] == "json_invalid":
            return "the body is not valid JSON"
        loc = "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in e.get("loc", ()))
        parts.append(f"{loc.lstrip('.')}: {e['msg']}")
    message = "; ".join(parts) + (f" (and {len(errors) - 5} more)" if len(errors) > 5 else "")
    if request.url.path.endswith("/forget") and any(
        tuple(e.get("loc", ())) == ("body", "message_ids") for e in errors
    ):
        message += "; to delete every message of the user: DELETE /v1/users/{user_id}"
    return message


def serve(overrides: Sequence[str]) -> int:
    """`lazymem serve [overrides]`: compose the agent config, check it as every task's is checked
    (lazymem/agent/entry.py), run the service until interrupted. A bad setting, a missing model or a bad
    keys file stops the start-up with one line naming the key."""
    try:
        cfg, settings = load(overrides)
        tenants = Tenants.from_settings(settings)
    except ConfigError as e:
        raise SystemExit(f"lazymem serve: {one_line(e)}") from None
    if not tenants:
        where = f"${settings.serve.keys_env}" if settings.serve.keys_env else "an environment variable"
        raise SystemExit(f"lazymem serve: no API keys (set serve.keys_file or {where})")
    memory = Memory.from_cfg(cfg, settings)
    http_server.run(create_app(memory, tenants, settings), settings, tenants)
    return 0
