"""The HTTP service's ASGI middleware and logging: body size limits, paths that must decode as UTF-8, and
log lines that carry no API key (wherever a client put one: the path, the query string)."""

from __future__ import annotations

import copy
import logging
from contextvars import ContextVar
from urllib.parse import unquote, unquote_to_bytes

from fastapi import HTTPException
from fastapi.responses import JSONResponse

from lazymem.agent.errors import BadInput, TooLarge
from lazymem.agent.tenants import REDACTED, Tenants


class ValidPath:
    """ASGI middleware: 400 (bad_input) for a path whose percent-escapes are not UTF-8. The server would
    decode them to U+FFFD, so `%FE` and `%FF` would name one user."""

    def __init__(self, app):
        self.app = app

    async def __call__(self, scope, receive, send):
        if scope["type"] == "http":
            raw = scope.get("raw_path") or scope["path"].encode()
            try:
                unquote_to_bytes(raw).decode("utf-8")
            except UnicodeDecodeError:
                detail = "the path is not valid UTF-8 once decoded"
                reply = JSONResponse({"code": BadInput.code, "detail": detail}, status_code=BadInput.status)
                return await reply(scope, receive, send)
        return await self.app(scope, receive, send)


# The bearer token of the request being served, set by lazymem.agent.http_server in the request's task before
# uvicorn's own trace logging sees the request: a path segment equal to it is redacted even when it is no key
# of this service (a mistyped or another deployment's key)
REQUEST_KEY: ContextVar[str | None] = ContextVar("lazymem_request_key", default=None)
# formats a traceback as the handlers' formatters do (uvicorn/logging.py's keep logging.Formatter's own)
_EXCEPTIONS = logging.Formatter()


class RedactKeys(logging.Filter):
    """No API key reaches a log line, at any level. On every handler of the service's log:

    - access lines (uvicorn/protocols/http/h11_impl.py:472-480: client, method, path?query, version, status)
      lose their query string, and path segments equal to the request's bearer token;
    - uvicorn's trace lines (uvicorn/middleware/message_logger.py:76-78 logs the ASGI scope; headers and
      bodies are placeholders there already) lose the scope's query string and such path segments;
    - then every line, an exception's traceback included, has each key of `keys` (lazymem.agent.tenants:
      as written or percent-encoded) replaced by [redacted].

    A line whose cleaning fails is dropped rather than written as it was."""

    def __init__(self, keys: Tenants | None = None):
        super().__init__()
        self.keys = keys

    def filter(self, record: logging.LogRecord) -> bool:
        try:
            self._clean(record)
        except Exception:  # noqa: BLE001 - never write what could not be checked
            return False
        return True

    def _clean(self, record: logging.LogRecord) -> None:
        token = REQUEST_KEY.get()
        if record.name == "uvicorn.access" and isinstance(record.args, tuple) and len(record.args) == 5:
            # uvicorn's AccessFormatter unpacks these five (uvicorn/logging.py:97-104): clean them in place
            args = list(record.args)
            args[2] = _target(args[2], token) if isinstance(args[2], str) else args[2]
            record.args = tuple(self._text(a) if isinstance(a, str) else a for a in args)
            return
        if isinstance(record.args, tuple):
            record.args = tuple(_scope(a, token) if _is_scope(a) else a for a in record.args)
        message = record.getMessage()
        clean = self._text(message)
        if clean != message:
            record.msg, record.args = clean, ()
            record.__dict__.pop("color_message", None)  # uvicorn's coloured copy of the same line
        if record.exc_info and not record.exc_text:
            record.exc_text = _EXCEPTIONS.formatException(record.exc_info)  # what Formatter.format caches
        if record.exc_text:
            record.exc_text = self._text(record.exc_text)
        if record.stack_info:
            record.stack_info = self._text(record.stack_info)

    def _text(self, text: str) -> str:
        return self.keys.redact(text) if self.keys is not None else text


def _target(target: str, token: str | None) -> str:
    """An access line's path?query: the query as [redacted] (a client may put a key there)."""
    path, sep, _ = target.partition("?")
    return _path(path, token) + (f"?{REDACTED}" if sep else "")


def _path(path: str, token: str | None) -> str:
    """`path` with every segment that decodes to `token` as [redacted]."""
    if not token:
        return path
    return "/".join(REDACTED if unquote(part) == token else part for part in path.split("/"))


def _is_scope(value: object) -> bool:
    return isinstance(value, dict) and value.get("type") in ("http", "websocket") and "path" in value


def _scope(scope: dict, token: str | None) -> dict:
    clean = dict(scope)
    if isinstance(scope.get("path"), str):
        clean["path"] = _path(scope["path"], token)
    if isinstance(scope.get("raw_path"), bytes):
        clean["raw_path"] = _path(scope["raw_path"].decode("latin-1"), token).encode("latin-1")
    if scope.get("query_string"):
        clean["query_string"] = REDACTED.encode()
    return clean


def log_config(log_level: str = "info", keys: Tenants | None = None) -> dict:
    """uvicorn's logging set-up (uvicorn/config.py:83-114, LOGGING_CONFIG) with RedactKeys on every handler,
    and the `lazymem` loggers (the background loops' purge, indexing and error lines) written by its default
    handler, in its format, at `log_level` (a name of uvicorn/config.py:44-51)."""
    from uvicorn.config import LOG_LEVELS, LOGGING_CONFIG

    config = copy.deepcopy(LOGGING_CONFIG)
    config["filters"] = {"redact_keys": {"()": RedactKeys, "keys": keys}}  # dictConfig passes `keys` as is
    for handler in config["handlers"].values():
        handler["filters"] = ["redact_keys"]
    config["loggers"]["lazymem"] = {
        "handlers": ["default"],
        "level": LOG_LEVELS[log_level],
        "propagate": False,
    }
    return config


class BodyLimit:
    """ASGI middleware: 413 (too_large) for a body over its limit, by its Content-Length before anything is
    read, or while a body without one streams in (an HTTPException, which the app answers). Imports (paths
    ending in /import) have a limit of their own."""

    def __init__(self, app, max_bytes: int, max_import_bytes: int):
        self.app, self.max_bytes, self.max_import_bytes = app, max_bytes, max_import_bytes

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        limit, key = self.max_bytes, "serve.max_body_bytes"
        if scope["path"].endswith("/import"):
            limit, key = self.max_import_bytes, "serve.max_import_bytes"
        length = dict(scope["headers"]).get(b"content-length", b"0")
        if not length.isdigit() or int(length) > limit:
            reply = JSONResponse({"code": TooLarge.code, "detail": _too_large(limit, key)}, TooLarge.status)
            return await reply(scope, receive, send)
        seen = 0

        async def limited():
            nonlocal seen
            message = await receive()
            seen += len(message.get("body", b""))
            if seen > limit:
                raise HTTPException(413, _too_large(limit, key))  # FastAPI answers it as it reads the body
            return message

        await self.app(scope, limited, send)


def _too_large(limit: int, key: str) -> str:
    return f"request body larger than {limit} bytes ({key})"
