"""`lazymem serve`: the Memory API over HTTP (FastAPI under uvicorn), one tenant per API key.

    lazymem serve [overrides]     # e.g. method=rag serve.port=9000 agent.dir=/srv/lazymem

Endpoints (OpenAPI page at /docs, schema at /openapi.json); every /v1 call needs `Authorization: Bearer KEY`
and only ever reaches the users of that key's tenant:
  POST /v1/users/{user_id}/messages  {"messages": [{"role", "text", "time"?, "session_id"?}]} -> {"ids"}
  POST /v1/users/{user_id}/query     {"question", "now"?} -> the memory block, kept messages, tokens, timings
  POST /v1/users/{user_id}/forget    {"message_ids"?: [...]} (none: all) -> {"deleted"}
  GET  /v1/users/{user_id}/export    ?vectors=true? ?format=ndjson? -> {"user_id", "messages"} (or NDJSON)
  POST /v1/users/{user_id}/import    NDJSON, one message per line (+ "source"?, "vectors"?) -> {"stored"}
  GET  /health

Keys come from `serve.keys_file` (YAML, tenant -> keys and retention) and the environment variable named
by `serve.keys_env`; they are held only as sha256 digests and never logged: access log lines carry the
path without its query string, wherever a client put a key. Questions travel in POST bodies, so no message
text or question reaches an access log line. A tenant's `retention_days` is enforced by a purge at
start-up and every `serve.purge_every_s`, and the store's maintenance step (which makes deletions final
in its files) runs every `serve.maintain_every_s` (lazymem/agent/background.py); /health says when each
last succeeded.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import logging
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from fastapi import Depends, FastAPI, HTTPException, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, StreamingResponse
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from pydantic import BaseModel, ConfigDict

from lazymem.agent.background import Indexer, Maintenance, Refresh, Retention
from lazymem.agent.memory import BadInput, Memory, compose
from lazymem.agent.middleware import BodyLimit, ValidPath, log_config
from lazymem.agent.store import UnknownMessages, UnknownUser
from lazymem.agent.transfer import export_lines
from lazymem.construct.processor import StageError

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Tenant:
    name: str
    retention_days: float | None = None


class Tenants:
    """API keys -> tenants. Keys are kept as sha256 digests only."""

    def __init__(self, keys: dict[str, Tenant]):
        self._by_digest = {_digest(k): t for k, t in keys.items()}
        self.all = {t.name: t for t in keys.values()}

    def __len__(self) -> int:
        return len(self._by_digest)

    def lookup(self, key: str) -> Tenant | None:
        return self._by_digest.get(_digest(key))

    @classmethod
    def load(cls, keys_file: str | None, keys_env: str | None, retention_days: float | None) -> Tenants:
        """From a YAML file (`TENANT: {keys: [KEY, ...], retention_days: N}`) and the environment variable
        `keys_env` ("KEY=TENANT,KEY=TENANT", retention `retention_days`); a key named twice is an error."""
        keys: dict[str, Tenant] = {}

        def put(key: str, tenant: Tenant, where: str) -> None:
            if not key or key in keys:
                raise ValueError(f"{where}: an empty or repeated API key (for tenant {tenant.name!r})")
            keys[key] = tenant

        if keys_file:
            data = yaml.safe_load(Path(keys_file).read_text()) or {}
            if not isinstance(data, dict):
                raise ValueError(f"{keys_file}: expected a mapping TENANT -> {{keys: [...], retention_days}}")
            for name, entry in data.items():
                where = f"{keys_file}: tenant {name!r}"
                if not isinstance(name, str) or not name.strip():
                    raise ValueError(f"{keys_file}: tenant names must be non-empty strings, got {name!r}")
                if not isinstance(entry, dict) or not isinstance(entry.get("keys"), list):
                    raise ValueError(f"{where} needs a list `keys`")
                unknown = set(entry) - {"keys", "retention_days"}
                if unknown:
                    raise ValueError(f"{where} has unknown fields {sorted(unknown)}")
                days = check_retention(
                    entry.get("retention_days", retention_days), f"{where}, retention_days"
                )
                tenant = Tenant(name, days)
                for n, key in enumerate(entry["keys"]):
                    if not isinstance(key, str):
                        raise ValueError(f"{where}, keys[{n}]: a key must be a string")
                    put(key, tenant, keys_file)
        env_pairs = list(filter(None, os.environ.get(keys_env or "", "").split(",")))
        if env_pairs:
            retention_days = check_retention(retention_days, "agent.retention_days")
        for pair in env_pairs:
            key, sep, name = pair.strip().partition("=")
            if not sep or not name:
                raise ValueError(f"${keys_env}: expected KEY=TENANT pairs separated by commas")
            put(key, Tenant(name, retention_days), f"${keys_env}")
        return cls(keys)


def check_retention(days: Any, where: str) -> float | None:
    """Days to keep messages: a number >= 0, or None (forever). A bad value refuses the start-up: the purge
    would otherwise fail on it later, for every tenant."""
    if days is None:
        return None
    if isinstance(days, bool) or not isinstance(days, (int, float)) or not days >= 0:
        raise ValueError(f"{where}: expected a number of days >= 0 (or null: keep forever), got {days!r}")
    return float(days)


def _digest(key: str) -> str:
    return hashlib.sha256(key.encode()).hexdigest()


# ---- request and reply bodies (the OpenAPI schema)


class _Body(BaseModel):
    model_config = ConfigDict(extra="forbid")


class MessageIn(_Body):
    role: str
    text: str
    time: str | None = None
    session_id: str | None = None


class AddRequest(_Body):
    messages: list[MessageIn]


class AddReply(BaseModel):
    ids: list[int]


class QueryRequest(_Body):
    question: str
    now: str | None = None


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
    message_ids: list[int] | None = None


class ForgetReply(BaseModel):
    deleted: int


class StoredMessageOut(RecalledMessage):
    added: float
    # with ?vectors=true: {model identity: {key: base64 float32}} (lazymem/agent/vectors.py)
    vectors: dict[str, dict[str, str]] | None = None


class ExportReply(BaseModel):
    user_id: str
    messages: list[StoredMessageOut]


_bearer = HTTPBearer(auto_error=False)


def _tenant_of(
    request: Request, credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)]
) -> str:
    tenant = request.app.state.tenants.lookup(credentials.credentials) if credentials is not None else None
    if tenant is None:
        raise HTTPException(401, "missing or unknown API key", headers={"WWW-Authenticate": "Bearer"})
    return tenant.name


TenantName = Annotated[str, Depends(_tenant_of)]


def create_app(
    memory: Memory,
    tenants: Tenants,
    max_body_bytes: int,
    purge_every_s: float,
    purge_retry_s: float = 60.0,
    refresh_every_s: float = 5.0,
    max_import_bytes: int = 2**28,
    index_every_s: float = 1.0,
    index_lease_s: float = 600.0,
    maintain_every_s: float = 600.0,
) -> FastAPI:
    """The service around `memory`; it closes `memory` when it shuts down."""
    loops = [
        retention := Retention(memory, tenants.all.values(), purge_every_s, purge_retry_s),
        maintenance := Maintenance(memory, maintain_every_s),
        Refresh(memory, refresh_every_s),
        Indexer(memory, index_every_s, index_lease_s),
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
    app.add_middleware(BodyLimit, max_bytes=max_body_bytes, max_import_bytes=max_import_bytes)
    app.add_middleware(ValidPath)
    app.state.tenants = tenants

    @app.exception_handler(RequestValidationError)
    async def invalid(request: Request, exc: RequestValidationError) -> JSONResponse:
        errors = [{k: e[k] for k in ("type", "loc", "msg") if k in e} for e in exc.errors()]
        bad_json = any(e["type"] == "json_invalid" for e in errors)
        return JSONResponse({"detail": errors}, status_code=400 if bad_json else 422)

    @app.exception_handler(BadInput)
    async def bad_input(request: Request, exc: BadInput) -> JSONResponse:
        return JSONResponse({"detail": str(exc)}, status_code=400)

    async def not_found(request: Request, exc: KeyError) -> JSONResponse:
        return JSONResponse({"detail": str(exc)}, status_code=404)

    app.add_exception_handler(UnknownUser, not_found)
    app.add_exception_handler(UnknownMessages, not_found)

    @app.exception_handler(StageError)
    async def model_failed(request: Request, exc: StageError) -> JSONResponse:
        log.error("memory model failed on %s", request.url.path)  # its message may quote the prompt
        return JSONResponse({"detail": "the memory model failed; try again"}, status_code=502)

    @app.get("/health")
    async def health() -> dict:
        return {
            "status": "ok",
            "method": memory.method.name,
            "retention": retention.status(),
            "maintenance": maintenance.status(),
        }

    @app.post("/v1/users/{user_id}/messages", status_code=201)
    async def add(user_id: str, body: AddRequest, tenant: TenantName) -> AddReply:
        messages = [m.model_dump(exclude_none=True) for m in body.messages]
        return AddReply(ids=await memory.aadd(user_id, messages, tenant=tenant))

    @app.post("/v1/users/{user_id}/query")
    async def query(user_id: str, body: QueryRequest, tenant: TenantName) -> QueryReply:
        recall = await memory.aquery(user_id, body.question, body.now, tenant=tenant)
        return QueryReply(**recall.to_dict())

    @app.post("/v1/users/{user_id}/forget")
    async def forget(user_id: str, body: ForgetRequest, tenant: TenantName) -> ForgetReply:
        return ForgetReply(deleted=await memory.aforget(user_id, body.message_ids, tenant=tenant))

    @app.get("/v1/users/{user_id}/export", response_model=ExportReply, response_model_exclude_none=True)
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

    @app.post("/v1/users/{user_id}/import", openapi_extra=_NDJSON_BODY)
    async def import_(user_id: str, request: Request, tenant: TenantName) -> JSONResponse:
        """A long history as NDJSON, one message per line (`role`, `text`, `time`?, `session_id`?,
        `source`?, `vectors`? as an export with vectors gives them), stored in batches as it streams in.
        A bad line stops the import with 400 naming it; `stored` says how many lines before it are kept.
        Give each line a `source` (e.g. "file:line") and a retried import skips what is already stored."""
        stored = 0
        try:
            async for batch in _ndjson_batches(request, max_body_bytes, memory.limits.max_messages_per_add):
                stored = await memory.aimport(user_id, batch, tenant=tenant, batch_size=len(batch)) + stored
        except BadInput as e:
            return JSONResponse({"detail": f"after {stored} stored messages: {e}", "stored": stored}, 400)
        return JSONResponse({"stored": stored}, status_code=201)

    return app


_NDJSON_BODY = {
    "requestBody": {"content": {"application/x-ndjson": {"schema": {"type": "string"}}}, "required": True}
}
_IMPORT_FIELDS = {"role", "text", "time", "session_id", "source", "vectors"}
# what an NDJSON export's lines also carry, ignored by an import: ids are new, retention counts from the
# import, and the path names the user
_EXPORT_ONLY_FIELDS = {"id", "added", "user_id"}


async def _ndjson_batches(request: Request, max_line_bytes: int, batch_size: int):
    """Messages from an NDJSON body, `batch_size` at a time, checked line by line as they arrive."""
    buffer, batch, line_no = b"", [], 0
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
            if len(batch) == batch_size:
                yield batch
                batch = []
    line_no += 1
    if buffer.strip():
        batch.append(_ndjson_message(buffer, line_no))
    if batch:
        yield batch


def _ndjson_message(line: bytes, line_no: int) -> dict:
    try:
        message = json.loads(line)
    except ValueError:
        raise BadInput(f"line {line_no} is not a JSON object") from None
    if not isinstance(message, dict):
        raise BadInput(f"line {line_no} is not a JSON object")
    unknown = set(message) - _IMPORT_FIELDS - _EXPORT_ONLY_FIELDS
    if unknown:
        raise BadInput(f"line {line_no} has unknown fields {sorted(unknown)}")
    return {k: v for k, v in message.items() if k in _IMPORT_FIELDS}


def serve(overrides: Sequence[str]) -> int:
    """`lazymem serve [overrides]`: compose the agent config and run the service until interrupted."""
    import uvicorn

    cfg = compose(overrides)
    s = cfg.serve
    tenants = Tenants.load(s.keys_file, s.keys_env, cfg.agent.retention_days)
    if not tenants:
        raise SystemExit(f"lazymem serve: no API keys (set serve.keys_file or ${s.keys_env})")
    app = create_app(
        Memory.from_cfg(cfg),
        tenants,
        s.max_body_bytes,
        s.purge_every_s,
        s.purge_retry_s,
        s.refresh_every_s,
        s.max_import_bytes,
        s.index_every_s,
        cfg.agent.index_lease_s,
        s.maintain_every_s,
    )
    uvicorn.run(app, host=s.host, port=s.port, log_level=s.log_level, log_config=log_config())
    return 0
