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
                                       "skipped"}
  GET    /health (liveness: the process answers), GET /ready (readiness: the store answers, 503 if not)

Every error is `{"code", "detail"}` with one code per kind of error (lazymem/agent/errors.py, the same codes
as the Python exceptions and the MCP tool errors); a 503 `store_unavailable` carries Retry-After.

Keys come from `serve.keys_file` (YAML, tenant -> keys and retention) and the environment variable named
by `serve.keys_env` (lazymem/agent/tenants.py; SIGHUP reads them again); no log line carries one, wherever
a client put it (lazymem/agent/middleware.py). Questions travel in POST bodies, so no message text or
question reaches an access log line. Settings are checked once at start-up (lazymem/agent/settings.py), and
uvicorn runs with a request-head timeout and refuses ambiguous framing (lazymem/agent/http_server.py).
A tenant's `retention_days` is enforced by a purge at start-up and every `serve.purge_every_s`, and the
store's maintenance step (which makes deletions final in its files) runs every `serve.maintain_every_s`
(lazymem/agent/background.py); /health says when each last succeeded.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import logging
import math
from collections.abc import Sequence
from typing import Annotated, Literal

from fastapi import Depends, FastAPI, Header, HTTPException, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, StreamingResponse
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from pydantic import BaseModel, ConfigDict, StrictInt, StrictStr
from starlette.exceptions import HTTPException as StarletteHTTPException

from lazymem.agent import http_server
from lazymem.agent.background import Indexer, Maintenance, Refresh, Retention
from lazymem.agent.errors import AgentError, BadInput, ModelFailed, StoreUnavailable
from lazymem.agent.memory import ImportStopped, Memory, compose
from lazymem.agent.middleware import BodyLimit, ValidPath
from lazymem.agent.settings import ConfigError, Settings
from lazymem.agent.tenants import Tenants
from lazymem.agent.transfer import export_lines
from lazymem.construct.processor import StageError

log = logging.getLogger(__name__)


# ---- request and reply bodies (the OpenAPI schema)


class _Body(BaseModel):
    """Request bodies: unknown fields refused, nothing coerced ("13" is not an id, 12 is not a text)."""

    model_config = ConfigDict(extra="forbid", strict=True)


class MessageIn(_Body):
    role: StrictStr
    text: StrictStr
    time: StrictStr | None = None
    session_id: StrictStr | None = None


class AddRequest(_Body):
    messages: list[MessageIn]


class AddReply(BaseModel):
    ids: list[int]


class QueryRequest(_Body):
    question: StrictStr
    now: StrictStr | None = None


class RecalledMessage(BaseModel):
    id: int
    time: str
    role: str
    session_id: str
    text: str


class QueryReply(BaseModel):
    text: str
    style: str
    messages: list[RecalledMessage]
    tokens: int
    timings: dict[str, float]


class ForgetRequest(_Body):
    message_ids: list[StrictInt]


class ForgetReply(BaseModel):
    deleted: int


class StoredMessageOut(RecalledMessage):
    added: float
    # with ?vectors=true: {model identity: {key: base64 float32}} (lazymem/agent/vectors.py)
    vectors: dict[str, dict[str, str]] | None = None


class ExportReply(BaseModel):
    user_id: str
    messages: list[StoredMessageOut]


class ErrorReply(BaseModel):
    code: str
    detail: str


class ReadyReply(BaseModel):
    status: str
    backlog: int
    oldest_pending_s: float | None
    oldest_claim_s: float | None


# the error replies of the /v1 routes, in the OpenAPI schema
_ERRORS = {status: {"model": ErrorReply} for status in (400, 401, 404, 409, 413, 502, 503)}
# what a route-level HTTP status means, as an error code
_HTTP_CODES = {
    400: "bad_input",  # a body FastAPI could not parse (bytes that are not UTF-8, JSON nested too deep)
    401: "unauthorized",
    404: "not_found",
    405: "method_not_allowed",
    413: "too_large",
}
# the longest `detail` a reply carries: an error may quote what the client sent
_MAX_DETAIL = 500


_bearer = HTTPBearer(auto_error=False)


def _tenant_of(
    request: Request, credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)]
) -> str:
    tenant = request.app.state.tenants.lookup(credentials.credentials) if credentials is not None else None
    if tenant is None:
        raise HTTPException(401, "missing or unknown API key", headers={"WWW-Authenticate": "Bearer"})
    return tenant.name


TenantName = Annotated[str, Depends(_tenant_of)]


def create_app(memory: Memory, tenants: Tenants, settings: Settings) -> FastAPI:
    """The service around `memory` under `settings` (lazymem/agent/settings.py); it closes `memory` when it
    shuts down."""
    s = settings.serve
    max_body_bytes = s.max_body_bytes
    loops = [
        retention := Retention(memory, lambda: tenants.all.values(), s.purge_every_s, s.purge_retry_s),
        maintenance := Maintenance(memory, s.maintain_every_s),
        Refresh(memory, s.refresh_every_s),
        Indexer(memory, s.index_every_s, settings.agent.index_lease_s),
    ]

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI):
        tasks = [asyncio.create_task(loop.run()) for loop in loops]
        try:
            yield
        finally:
            for task in tasks:
                task.cancel()
            await asyncio.to_thread(memory.close)

    app = FastAPI(title="LazyMem", summary="Query-time memory construction for agents", lifespan=lifespan)
    app.add_middleware(BodyLimit, max_bytes=max_body_bytes, max_import_bytes=s.max_import_bytes)
    app.add_middleware(ValidPath)
    app.state.tenants = tenants

    @app.exception_handler(RequestValidationError)
    async def invalid(request: Request, exc: RequestValidationError) -> JSONResponse:
        return error_reply(BadInput(_validation_message(request, exc.errors())))

    @app.exception_handler(AgentError)
    async def agent_error(request: Request, exc: AgentError) -> JSONResponse:
        return error_reply(exc)

    @app.exception_handler(StageError)
    async def model_failed(request: Request, exc: StageError) -> JSONResponse:
        log.error("memory model failed on %s", request.url.path)  # its message may quote the prompt
        return error_reply(ModelFailed("the memory model failed; try again"))

    @app.exception_handler(StarletteHTTPException)
    async def http_error(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        code = _HTTP_CODES.get(exc.status_code, "error")
        detail = _bounded(str(exc.detail))
        return JSONResponse({"code": code, "detail": detail}, exc.status_code, headers=exc.headers)

    @app.get("/health")
    async def health() -> dict:
        """Liveness: the process answers (200 even while the store is away; /ready tells that)."""
        return {
            "status": "ok",
            "method": memory.method.name,
            "retention": retention.status(),
            "maintenance": maintenance.status(),
        }

    @app.get("/ready", responses={503: {"model": ErrorReply}})
    async def ready() -> ReadyReply:
        """Readiness: the store answers (within about a second), with the indexing backlog; 503 with
        `store_unavailable` while it does not."""
        state = await memory.aready()
        return ReadyReply(status="ready", **dataclasses.asdict(state))

    @app.post("/v1/users/{user_id}/messages", status_code=201, responses=_ERRORS)
    async def add(
        user_id: str,
        body: AddRequest,
        tenant: TenantName,
        idempotency_key: Annotated[str | None, Header(alias="Idempotency-Key")] = None,
    ) -> AddReply:
        """Store messages; their ids. With an `Idempotency-Key` header, a retry of the same body returns
        the first add's ids and stores nothing; the key with another body is a 409."""
        messages = [m.model_dump(exclude_none=True) for m in body.messages]
        ids = await memory.aadd(user_id, messages, tenant=tenant, idempotency_key=idempotency_key)
        return AddReply(ids=ids)

    @app.post("/v1/users/{user_id}/query", responses=_ERRORS)
    async def query(user_id: str, body: QueryRequest, tenant: TenantName) -> QueryReply:
        recall = await memory.aquery(user_id, body.question, body.now, tenant=tenant)
        return QueryReply(**recall.to_dict())

    @app.post("/v1/users/{user_id}/forget", responses=_ERRORS)
    async def forget(user_id: str, body: ForgetRequest, tenant: TenantName) -> ForgetReply:
        """Delete the given messages (an empty list deletes nothing). Every message: DELETE the user."""
        return ForgetReply(deleted=await memory.aforget(user_id, body.message_ids, tenant=tenant))

    @app.delete("/v1/users/{user_id}", responses=_ERRORS)
    async def forget_all(user_id: str, tenant: TenantName) -> ForgetReply:
        """Delete every message of the user, what was derived from them, and the user's idempotency keys."""
        return ForgetReply(deleted=await memory.aforget_all(user_id, tenant=tenant))

    @app.get(
        "/v1/users/{user_id}/export",
        response_model=ExportReply,
        response_model_exclude_none=True,
        responses=_ERRORS,
    )
    async def export(
        user_id: str, tenant: TenantName, vectors: bool = False, format: Literal["json", "ndjson"] = "json"
    ):
        """The user's messages, oldest first; with `vectors=true` each embedded one carries its vectors,
        which an import into a deployment of the same encoder stores instead of embedding again. With
        `format=ndjson`, one message per line as `lazymem export` writes it (what the import endpoint
        reads), streamed page by page: a user of any size in bounded memory."""
        if format == "json":
            messages = await memory.aexport(user_id, tenant=tenant, vectors=vectors)
            return ExportReply(user_id=user_id, messages=messages)
        pages = memory.aexport_pages(user_id, tenant=tenant, vectors=vectors)
        first = await anext(pages)  # an unknown user is a 404 before anything is sent

        async def lines():
            part = first
            while part is not None:
                yield "".join(line + "\n" for line in export_lines(user_id, part))
                part = await anext(pages, None)

        return StreamingResponse(lines(), media_type="application/x-ndjson")

    @app.post("/v1/users/{user_id}/import", openapi_extra=_NDJSON_BODY, responses=_ERRORS)
    async def import_(user_id: str, request: Request, tenant: TenantName) -> JSONResponse:
        """A long history as NDJSON, one message per line (`role`, `text`, `time`?, `session_id`?,
        `source`?, `vectors`? as an export with vectors gives them), stored in batches as it streams in.
        A bad line stops the import with 400 naming its line and field, a body over serve.max_import_bytes
        with 413; either way `stored` says how many messages before it are kept. Give each line a `source`
        (e.g. "file:line") and a retried import skips what is already stored (`skipped` counts them)."""
        stored = skipped = 0
        size = memory.limits.max_messages_per_add

        def stopped(reason: str, status: int, code: str) -> JSONResponse:
            detail = _bounded(f"{reason} ({stored} messages of this import stored before it)")
            return JSONResponse({"code": code, "detail": detail, "stored": stored}, status)

        try:
            async for lines, batch in _ndjson_batches(request, max_body_bytes, size):
                where = [f"line {n}" for n in lines]
                done = await memory.aimport(
                    user_id, batch, tenant=tenant, batch_size=len(batch), where=where.__getitem__
                )
                stored, skipped = stored + done.stored, skipped + done.skipped
        except ImportStopped as e:  # the batches of this call before the bad message are kept
            stored += e.imported.stored
            return stopped(e.reason, 400, "bad_input")
        except BadInput as e:
            return stopped(str(e), 400, "bad_input")
        except StarletteHTTPException as e:
            if e.status_code != 413:
                raise
            return stopped(str(e.detail), 413, "too_large")
        return JSONResponse({"stored": stored, "skipped": skipped}, status_code=201)

    return app


def error_reply(exc: AgentError) -> JSONResponse:
    """An AgentError as its HTTP reply: its status, `{"code", "detail"}`, Retry-After on a 503. What the
    store said stays in the service's log: it names the database's address, no business of a client's."""
    headers, detail = None, _bounded(str(exc))
    if isinstance(exc, StoreUnavailable):
        headers = {"Retry-After": str(max(1, math.ceil(exc.retry_after_s)))}
        log.warning("store unavailable: %s", exc)
        detail = "the memory store is not reachable now; retry after Retry-After seconds (an add: same key)"
    return JSONResponse({"code": exc.code, "detail": detail}, exc.status, headers=headers)


def _bounded(text: str) -> str:
    return text if len(text) <= _MAX_DETAIL else text[: _MAX_DETAIL - 3] + "..."


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


_NDJSON_BODY = {
    "requestBody": {"content": {"application/x-ndjson": {"schema": {"type": "string"}}}, "required": True}
}


async def _ndjson_batches(request: Request, max_line_bytes: int, batch_size: int):
    """Messages from an NDJSON body, `batch_size` at a time with their line numbers, checked line by line
    as they arrive."""
    buffer, batch, numbers, line_no = b"", [], [], 0
    async for chunk in request.stream():
        buffer += chunk
        if b"\n" not in buffer and len(buffer) > max_line_bytes:
            raise BadInput(f"line {line_no + 1} is longer than {max_line_bytes} bytes (serve.max_body_bytes)")
        *lines, buffer = buffer.split(b"\n")
        for line in lines:
            line_no += 1
            if len(line) > max_line_bytes:
                raise BadInput(f"line {line_no} is longer than {max_line_bytes} bytes (serve.max_body_bytes)")
            if line.strip():
                batch.append(_ndjson_message(line, line_no))
                numbers.append(line_no)
            if len(batch) == batch_size:
                yield numbers, batch
                batch, numbers = [], []
    line_no += 1
    if buffer.strip():
        batch.append(_ndjson_message(buffer, line_no))
        numbers.append(line_no)
    if batch:
        yield numbers, batch


def _ndjson_message(line: bytes, line_no: int) -> dict:
    """One line as a message; its fields are checked by the import (lazymem/agent/inputs.py), which also
    ignores what an NDJSON export's lines carry besides (`id`, `added`, `user_id`)."""
    try:
        message = json.loads(line)
    except ValueError:
        raise BadInput(f"line {line_no} is not a JSON object") from None
    if not isinstance(message, dict):
        raise BadInput(f"line {line_no} is not a JSON object")
    return message


def serve(overrides: Sequence[str]) -> int:
    """`lazymem serve [overrides]`: compose the agent config, check it, run the service until interrupted.
    A bad setting or keys file stops the start-up with one line naming the key."""
    try:
        cfg = compose(overrides)
        settings = Settings.from_cfg(cfg)
        tenants = Tenants.from_settings(settings)
    except ConfigError as e:
        raise SystemExit(f"lazymem serve: {e}") from None
    if not tenants:
        where = f"${settings.serve.keys_env}" if settings.serve.keys_env else "an environment variable"
        raise SystemExit(f"lazymem serve: no API keys (set serve.keys_file or {where})")
    memory = Memory.from_cfg(cfg, settings)
    http_server.run(create_app(memory, tenants, settings), settings, tenants)
    return 0
