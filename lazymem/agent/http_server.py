"""uvicorn, hardened for a service on an open port: `run(app, settings, tenants)`.

- A client has `serve.header_timeout_s` to send a request's line and headers, counted from the connection
  or from the end of the previous response; one that sends part of them and stalls (or nothing at all) is
  disconnected. uvicorn has no such bound: its only timer is the keep-alive one, armed after a response and
  cancelled by the first byte of the next request (uvicorn/protocols/http/h11_impl.py:171-172, 313-322), so
  a partial request held a connection, and a worker's memory, for ever.
- An idle kept-alive connection closes `serve.idle_timeout_s` after its last response (uvicorn's
  timeout_keep_alive).
- A request with both Content-Length and Transfer-Encoding is refused with 400 and its connection closed:
  h11 would read its body by Transfer-Encoding (h11/_connection.py:126-131), a proxy in front of the service
  may read it by Content-Length, and the rest of the body would then pass as another request (smuggling).
- Logs go through lazymem.agent.middleware.log_config: no API key in any line, at any level, and the
  `lazymem` loggers' lines in the service's log.
- SIGHUP re-reads the API keys (lazymem.agent.tenants.install_reload) instead of ending the process.
"""

from __future__ import annotations

import asyncio

import h11
import uvicorn
from uvicorn.protocols.http.h11_impl import H11Protocol

from lazymem.agent.middleware import REQUEST_KEY, log_config
from lazymem.agent.settings import Settings
from lazymem.agent.tenants import Tenants, install_reload


class OneBodyLength(h11.Connection):
    """An h11 server connection that refuses a request with both Content-Length and Transfer-Encoding. h11
    itself refuses two different Content-Lengths and any Transfer-Encoding but `chunked`
    (h11/_headers.py:172-200), and accepts this pair."""

    def next_event(self):
        event = super().next_event()
        if isinstance(event, h11.Request):
            names = {name for name, _ in event.headers}  # lower-case (h11/_headers.py:119-121)
            if b"content-length" in names and b"transfer-encoding" in names:
                # uvicorn answers it with 400 and Connection: close, and closes (h11_impl.py:181-185, 295-311)
                raise h11.RemoteProtocolError(
                    "both Content-Length and Transfer-Encoding", error_status_hint=400
                )
        return event


class HardenedH11Protocol(H11Protocol):
    """uvicorn's h11 protocol (one instance per connection) with the request head bound, one body length
    per request, and the request's bearer token in middleware.REQUEST_KEY for the log redaction.

    `header_timeout_s` bounds a request head in all (a head sent a line at a time is cut off too), and the
    silence between two parts of a body: a body may stream for as long as it keeps coming, and time during
    which uvicorn itself holds reading back (the application is behind) does not count."""

    header_timeout_s: float = 10.0

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        # h11_impl.py:57-62 made the h11 connection (nothing holds it yet): the same, with its size bound
        # (h11/_connection.py:172)
        self.conn = OneBodyLength(h11.SERVER, self.conn._max_incomplete_event_size)
        # the app each request's task runs (h11_impl.py:52, 235, 258): outside uvicorn's trace logging
        # (uvicorn/config.py:541-542 wraps the app in it when the level is trace)
        self.app = _RememberKey(self.app)
        self._head_timer: asyncio.TimerHandle | None = None

    def connection_made(self, transport) -> None:
        super().connection_made(transport)
        self._start_head_timer()

    def data_received(self, data: bytes) -> None:
        super().data_received(data)
        # the client leaves IDLE once a request's head is complete (h11/_state.py:198), and is in SEND_BODY
        # until its body is (h11/_state.py:200-212)
        if self.conn.their_state is h11.SEND_BODY and not self.transport.is_closing():
            self._stop_head_timer()
            self._start_head_timer()  # the next part of the body is due from now
        elif self.conn.their_state is not h11.IDLE or self.transport.is_closing():
            self._stop_head_timer()
        elif self._head_timer is None:  # the head of a request after one answered before its body ended
            self._start_head_timer()

    def on_response_complete(self) -> None:
        super().on_response_complete()  # arms the keep-alive timer, handles a pipelined request
        self._stop_head_timer()
        if self.conn.their_state is h11.IDLE and not self.transport.is_closing():
            self._start_head_timer()  # the next request's head is due from now

    def connection_lost(self, exc: Exception | None) -> None:
        self._stop_head_timer()
        super().connection_lost(exc)

    def _start_head_timer(self) -> None:
        self._head_timer = self.loop.call_later(self.header_timeout_s, self._head_too_late)

    def _stop_head_timer(self) -> None:
        if self._head_timer is not None:
            self._head_timer.cancel()
            self._head_timer = None

    def _head_too_late(self) -> None:
        self._head_timer = None
        if self.transport.is_closing():
            return
        if self.flow is not None and self.flow.read_paused:  # uvicorn holds the body back (h11_impl.py:195)
            self._start_head_timer()
            return
        client = "{}:{} - ".format(*self.client) if self.client else ""  # as uvicorn's (h11_impl.py:103)
        self.logger.debug("%sno request head or body part within %gs: closing", client, self.header_timeout_s)
        self.transport.close()  # connection_lost tells h11 (h11_impl.py:106-129)


class _RememberKey:
    """ASGI wrapper: the request's bearer token (parsed as FastAPI's HTTPBearer does,
    fastapi/security/utils.py:1-7 and fastapi/security/http.py:308-320) in REQUEST_KEY, in the request's
    own task context."""

    def __init__(self, app):
        self.app = app

    async def __call__(self, scope, receive, send):
        if scope["type"] == "http":
            REQUEST_KEY.set(bearer_token(scope["headers"]))
        return await self.app(scope, receive, send)


def bearer_token(headers: list[tuple[bytes, bytes]]) -> str | None:
    """The token of the first Authorization header, if its scheme is Bearer."""
    for name, value in headers:
        if name == b"authorization":
            scheme, _, token = value.decode("latin-1").partition(" ")
            if scheme.lower() == "bearer" and token.strip():
                return token.strip()
            return None
    return None


def protocol(header_timeout_s: float) -> type[HardenedH11Protocol]:
    """The protocol class with this bound: uvicorn makes one instance per connection of the class given as
    Config(http=...) (uvicorn/config.py:451-452, server.py:122-130)."""
    return type("HardenedH11Protocol", (HardenedH11Protocol,), {"header_timeout_s": header_timeout_s})


def config(app, settings: Settings, tenants: Tenants | None = None) -> uvicorn.Config:
    """uvicorn's Config for `app` under `settings.serve`. Making it applies the log config to the process."""
    s = settings.serve
    return uvicorn.Config(
        app,
        host=s.host,
        port=s.port,
        http=protocol(s.header_timeout_s),
        ws="none",  # the API has no WebSocket route
        timeout_keep_alive=s.idle_timeout_s,  # a float works: it goes to loop.call_later (h11_impl.py:322)
        log_level=s.log_level,
        log_config=log_config(s.log_level, tenants),
    )


class Server(uvicorn.Server):
    """uvicorn's Server that re-reads `tenants` on SIGHUP while it serves."""

    def __init__(self, config: uvicorn.Config, tenants: Tenants | None = None):
        super().__init__(config)
        self.tenants = tenants

    async def serve(self, sockets=None) -> None:
        loop = asyncio.get_running_loop()
        undo = install_reload(self.tenants, loop) if self.tenants is not None else (lambda: None)
        try:
            await super().serve(sockets)
        finally:
            undo()


def run(app, settings: Settings, tenants: Tenants | None = None) -> None:
    """Serve `app` until SIGINT or SIGTERM (uvicorn's own handling)."""
    Server(config(app, settings, tenants), tenants).run()
