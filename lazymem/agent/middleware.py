"""The HTTP service's ASGI middleware and logging: body size limits, paths that must decode as UTF-8, and
access log lines without query strings (where a client may have put an API key)."""

from __future__ import annotations

import copy
import logging
from urllib.parse import unquote_to_bytes

from fastapi import HTTPException
from fastapi.responses import JSONResponse


class ValidPath:
    """ASGI middleware: 400 for a path whose percent-escapes are not UTF-8. The server would decode them to
    U+FFFD, so `%FE` and `%FF` would name one user."""

    def __init__(self, app):
        self.app = app

    async def __call__(self, scope, receive, send):
        if scope["type"] == "http":
            raw = scope.get("raw_path") or scope["path"].encode()
            try:
                unquote_to_bytes(raw).decode("utf-8")
            except UnicodeDecodeError:
                reply = JSONResponse({"detail": "the path is not valid UTF-8 once decoded"}, status_code=400)
                return await reply(scope, receive, send)
        return await self.app(scope, receive, send)


class RedactQuery(logging.Filter):
    """Access log lines without query strings: a client may put an API key there (`?api_key=...`)."""

    def filter(self, record: logging.LogRecord) -> bool:
        if isinstance(record.args, tuple) and len(record.args) >= 3 and isinstance(record.args[2], str):
            args = list(record.args)
            path, sep, _ = args[2].partition("?")
            args[2] = path + ("?[redacted]" if sep else "")
            record.args = tuple(args)
        return True


def log_config() -> dict:
    """uvicorn's logging set-up with the access handler behind RedactQuery."""
    from uvicorn.config import LOGGING_CONFIG

    config = copy.deepcopy(LOGGING_CONFIG)
    config.setdefault("filters", {})["redact_query"] = {"()": RedactQuery}
    config["handlers"]["access"]["filters"] = ["redact_query"]
    return config


class BodyLimit:
    """ASGI middleware: 413 for a body over its limit, by its Content-Length before anything is read, or
    while a body without one streams in. Imports (paths ending in /import) have a limit of their own."""

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
            reply = JSONResponse({"detail": _too_large(limit, key)}, status_code=413)
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
