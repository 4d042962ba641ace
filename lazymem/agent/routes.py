"""The service's routes (lazymem/agent/service.py builds the app around them), with their request and reply
bodies, which make the OpenAPI schema. A route reaches the memory, the tenants and the settings through
`request.app.state`, which `create_app` fills; the caller's tenant comes from its bearer key."""

from __future__ import annotations

import dataclasses
import json
import logging
from typing import Annotated, Literal

from fastapi import APIRouter, Depends, Header, HTTPException, Request
from fastapi.responses import JSONResponse, StreamingResponse
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from pydantic import BaseModel, ConfigDict, StrictInt, StrictStr
from starlette.exceptions import HTTPException as StarletteHTTPException

from lazymem.agent.errors import BadInput, StoreUnavailable
from lazymem.agent.memory import Memory
from lazymem.agent.moving import Imported, ImportStopped
from lazymem.agent.transfer import export_lines

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
    # the key it was stored under: an import of the export skips what is stored, or forgotten, by it
    source: str | None = None
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
# the longest `detail` a reply carries: an error may quote what the client sent
MAX_DETAIL = 500
# the import's body is NDJSON text, which FastAPI cannot infer from a route that reads the raw stream
_NDJSON_BODY = {
    "requestBody": {"content": {"application/x-ndjson": {"schema": {"type": "string"}}}, "required": True}
}


def bounded(text: str) -> str:
    """`text` cut to MAX_DETAIL characters."""
    return text if len(text) <= MAX_DETAIL else text[: MAX_DETAIL - 3] + "..."


# ---- what a route reaches: the memory, and the tenant of the caller's key

_bearer = HTTPBearer(auto_error=False)


def _tenant_of(
    request: Request, credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)]
) -> str:
    tenant = request.app.state.tenants.lookup(credentials.credentials) if credentials is not None else None
    if tenant is None:
        raise HTTPException(401, "missing or unknown API key", headers={"WWW-Authenticate": "Bearer"})
    return tenant.name


def _memory_of(request: Request) -> Memory:
    return request.app.state.memory


TenantName = Annotated[str, Depends(_tenant_of)]
TheMemory = Annotated[Memory, Depends(_memory_of)]

router = APIRouter()


@router.get("/health")
async def health(request: Request, memory: TheMemory) -> dict:
    """Liveness: the process answers (200 even while the store is away; /ready tells that)."""
    state = request.app.state
    return {
        "status": "ok",
        "method": memory.method.name,
        "retention": state.retention.status(),
        "maintenance": state.maintenance.status(),
        "reembedding": state.reembed.status(),
    }


@router.get("/ready", responses={503: {"model": ErrorReply}})
async def ready(memory: TheMemory) -> ReadyReply:
    """Readiness: the store answers (within about a second), with the indexing backlog; 503 with
    `store_unavailable` while it does not."""
    state = await memory.aready()
    return ReadyReply(status="ready", **dataclasses.asdict(state))


@router.post("/v1/users/{user_id}/messages", status_code=201, responses=_ERRORS)
async def add(
    user_id: str,
    body: AddRequest,
    request: Request,
    tenant: TenantName,
    memory: TheMemory,
    idempotency_key: Annotated[str | None, Header(alias="Idempotency-Key")] = None,
) -> AddReply:
    """Store messages; their ids. With an `Idempotency-Key` header, a retry of the same body returns
    the first add's ids and stores nothing; the key with another body is a 409. Two such headers are a
    400: which one the client meant cannot be told."""
    if len(request.headers.getlist("idempotency-key")) > 1:
        raise BadInput("more than one Idempotency-Key header; send one")
    messages = [m.model_dump(exclude_none=True) for m in body.messages]
    ids = await memory.aadd(user_id, messages, tenant=tenant, idempotency_key=idempotency_key)
    return AddReply(ids=ids)


@router.post("/v1/users/{user_id}/query", responses=_ERRORS)
async def query(user_id: str, body: QueryRequest, tenant: TenantName, memory: TheMemory) -> QueryReply:
    recall = await memory.aquery(user_id, body.question, body.now, tenant=tenant)
    return QueryReply(**recall.to_dict())


@router.post("/v1/users/{user_id}/forget", responses=_ERRORS)
async def forget(user_id: str, body: ForgetRequest, tenant: TenantName, memory: TheMemory) -> ForgetReply:
    """Delete the given messages (an empty list deletes nothing). Every message: DELETE the user."""
    return ForgetReply(deleted=await memory.aforget(user_id, body.message_ids, tenant=tenant))


@router.delete("/v1/users/{user_id}", responses=_ERRORS)
async def forget_all(user_id: str, tenant: TenantName, memory: TheMemory) -> ForgetReply:
    """Delete every message of the user, what was derived from them, and the user's idempotency keys."""
    return ForgetReply(deleted=await memory.aforget_all(user_id, tenant=tenant))


@router.get(
    "/v1/users/{user_id}/export",
    response_model=ExportReply,
    response_model_exclude_none=True,
    responses=_ERRORS,
)
async def export(
    user_id: str,
    tenant: TenantName,
    memory: TheMemory,
    vectors: bool = False,
    format: Literal["json", "ndjson"] = "json",
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


@router.post("/v1/users/{user_id}/import", openapi_extra=_NDJSON_BODY, responses=_ERRORS)
async def import_(user_id: str, request: Request, tenant: TenantName, memory: TheMemory) -> JSONResponse:
    """A long history as NDJSON, one message per line (`role`, `text`, `time`?, `session_id`?,
    `source`?, `vectors`? as an export with vectors gives them), stored in batches as it streams in.
    A bad line stops the import with 400 naming its line and field, a body over serve.max_import_bytes
    with 413, the store going away with 503; whichever, `stored` says how many messages before it are kept.
    Give each line a `source` (e.g. "file:line"; an export's lines carry the key each message was stored
    under) and a retried import skips what is already stored (`skipped` counts them) and what was forgotten
    since (`forgotten`)."""
    done = Imported()
    max_line_bytes = request.app.state.settings.serve.max_body_bytes
    size = memory.limits.max_messages_per_add

    def stopped(reason: str, status: int, code: str, headers: dict | None = None) -> JSONResponse:
        detail = bounded(f"{reason} ({done.stored} messages of this import stored before it)")
        return JSONResponse({"code": code, "detail": detail, "stored": done.stored}, status, headers=headers)

    try:
        async for lines, batch in _ndjson_batches(request, max_line_bytes, size):
            where = [f"line {n}" for n in lines]
            done += await memory.aimport(
                user_id, batch, tenant=tenant, batch_size=len(batch), where=where.__getitem__
            )
    except ImportStopped as e:  # the batches of this call before the bad message are kept
        done += e.imported
        return stopped(e.reason, 400, "bad_input")
    except BadInput as e:
        return stopped(str(e), 400, "bad_input")
    except StoreUnavailable as e:  # the batches before it are kept; the reason stays in the service's log
        log.warning("store unavailable during an import: %s", e)
        retry = {"Retry-After": e.retry_after_header()}
        return stopped("the memory store is not reachable now; retry the import later", 503, e.code, retry)
    except StarletteHTTPException as e:
        if e.status_code != 413:
            raise
        return stopped(str(e.detail), 413, "too_large")
    reply = {"stored": done.stored, "skipped": done.skipped, "forgotten": done.forgotten}
    return JSONResponse(reply, status_code=201)


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
    except RecursionError:
        raise BadInput(f"line {line_no} is JSON nested too deep") from None
    if not isinstance(message, dict):
        raise BadInput(f"line {line_no} is not a JSON object")
    return message
