"""lazymem.agent.http_server: a real uvicorn (a subprocess serving a tiny FastAPI app through `run`) with a
1 s request-head bound and a 0.5 s idle bound, driven over raw sockets: partial requests, idle and busy
kept-alive connections, Content-Length with Transfer-Encoding, API keys in a trace-level log, the `lazymem`
loggers' lines, and SIGHUP re-reading the keys."""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import time
from urllib.parse import quote

import httpx
import pytest

from lazymem.agent.http_server import bearer_token

from agent_helpers import free_port
from helpers import ROOT

HEAD_S, IDLE_S = 1.0, 0.5
SLACK_S = 1.0  # a loaded test machine's scheduling
KEY_A = "c2VjcmV0K2tleS8xMjM0NTY3OA+/="  # base64, with + / and a final =
KEY_B = "key-b-0123456789"  # only token characters: it can even stand as an HTTP method
KEY_C = "key-c-revoked-on-sighup"
ENV_KEY = "ZW52LWtleS0xMjM0NTY3OA=="
UNKNOWN = "not-a-key-7f3a9c1e"  # no key of the service, sent as a request's own bearer token

APP = """
import logging, sys
from fastapi import FastAPI, Header, HTTPException, Request
from omegaconf import OmegaConf
from lazymem.agent.entry import compose
from lazymem.agent.http_server import run
from lazymem.agent.settings import Settings
from lazymem.agent.tenants import Tenants

cfg = compose(sys.argv[1:])
settings = Settings.from_cfg(OmegaConf.to_container(cfg, resolve=True))
tenants = Tenants.from_settings(settings)
app = FastAPI()

@app.get("/ping")
async def ping():
    return {}

@app.post("/echo")
async def echo(request: Request):
    return {"bytes": len(await request.body())}

@app.get("/v1/users/{user}/query")
async def query(user: str, authorization: str = Header("")):
    tenant = tenants.lookup(authorization.partition(" ")[2])
    if tenant is None:
        raise HTTPException(401, "unknown key")
    return {"tenant": tenant.name}

@app.get("/v1/users/{user}/fail")
async def fail(user: str, request: Request):
    logging.getLogger("lazymem.agent.service").error("memory model failed on %s", request.url.path)
    raise RuntimeError(f"failed for {user}")

@app.get("/log")
async def log_line():
    logging.getLogger("lazymem.agent.background").info("indexed the new messages of %d users", 7)
    return {}

run(app, settings, tenants)
"""


class Server:
    def __init__(self, tmp):
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.keys = tmp / "keys.yaml"
        self.write_keys()
        self.log = tmp / "server.log"
        (tmp / "app.py").write_text(APP)
        overrides = [
            f"serve.port={self.port}",
            f"serve.keys_file={self.keys}",
            f"serve.header_timeout_s={HEAD_S}",
            f"serve.idle_timeout_s={IDLE_S}",
            "serve.log_level=trace",
        ]
        with open(self.log, "wb") as out:
            self.proc = subprocess.Popen(
                [sys.executable, str(tmp / "app.py"), *overrides],
                cwd=ROOT,
                stdout=out,
                stderr=subprocess.STDOUT,
                env={**os.environ, "LAZYMEM_API_KEYS": f" {ENV_KEY}=e , "},
            )
        deadline = time.monotonic() + 60
        while True:
            try:
                if httpx.get(self.url + "/ping", timeout=1).status_code == 200:
                    return
            except httpx.TransportError:
                pass
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"the server did not start:\n{self.log.read_text()[-3000:]}")
            time.sleep(0.1)

    def write_keys(self, text: str | None = None) -> None:
        self.keys.write_text(
            text or f"a: {{keys: ['{KEY_A}']}}\nb: {{keys: [{KEY_B}]}}\nc: {{keys: [{KEY_C}]}}\n"
        )

    def connect(self) -> socket.socket:
        return socket.create_connection(("127.0.0.1", self.port), timeout=5)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(30)


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    srv = Server(tmp_path_factory.mktemp("http_server"))
    yield srv
    srv.stop()


def closed_after(sock: socket.socket, started: float, limit_s: float) -> float | None:
    """Seconds from `started` until the server closed `sock` (whatever it sent first), or None if it was
    still open after `limit_s`."""
    while True:
        left = started + limit_s - time.monotonic()
        if left <= 0:
            return None
        sock.settimeout(left)
        try:
            if sock.recv(65536) == b"":
                return time.monotonic() - started
        except TimeoutError:
            return None
        except ConnectionResetError:
            return time.monotonic() - started


def response(sock: socket.socket) -> bytes:
    """One whole response (its body framed by Content-Length) read from `sock`."""
    data = b""
    while b"\r\n\r\n" not in data:
        data += sock.recv(65536)
    head, _, body = data.partition(b"\r\n\r\n")
    length = int(re.search(rb"content-length: (\d+)", head, re.I)[1])
    while len(body) < length:
        body += sock.recv(65536)
    return head + b"\r\n\r\n" + body


def test_a_partial_request_head_is_cut_off_even_while_it_trickles_in(server):
    sock, started = server.connect(), time.monotonic()
    sock.sendall(b"GET /ping HTTP/1.1\r\nHost: x\r\n")
    waited = closed_after(sock, started, HEAD_S + SLACK_S)
    assert waited is not None and waited >= HEAD_S * 0.8, waited

    sock, started = server.connect(), time.monotonic()
    sock.sendall(b"GET /ping HTTP/1.1\r\n")
    try:
        for _ in range(int((HEAD_S + SLACK_S) / 0.2)):  # a header line every 0.2 s: the bound still holds
            time.sleep(0.2)
            sock.sendall(b"X-Slow: 1\r\n")
    except (BrokenPipeError, ConnectionResetError):
        pass
    else:
        pytest.fail("a request head sent a line at a time was never cut off")
    assert time.monotonic() - started <= HEAD_S + SLACK_S


def test_a_body_that_stops_coming_is_cut_off_but_one_that_keeps_coming_is_not(server):
    sock, started = server.connect(), time.monotonic()
    sock.sendall(b"POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n123456")
    waited = closed_after(sock, started, HEAD_S + SLACK_S)
    assert waited is not None and waited >= HEAD_S * 0.8, waited

    sock, body = server.connect(), b"x" * 12
    sock.sendall(b"POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 12\r\n\r\n")
    for n in range(12):  # a byte every 0.25 s: 3 s in all, longer than the bound, but never silent that long
        time.sleep(0.25)
        sock.sendall(body[n : n + 1])
    assert response(sock).startswith(b"HTTP/1.1 200")


def test_fifty_partial_or_silent_connections_are_all_closed(server):
    socks, started = [], time.monotonic()
    for n in range(50):
        sock = server.connect()
        if n % 2:  # the other half connect and send nothing
            sock.sendall(b"POST /echo HTTP/1.1\r\nHost: x\r\nContent-Le")
        socks.append(sock)
    waited = [closed_after(sock, started, HEAD_S + SLACK_S) for sock in socks]
    assert None not in waited, f"{waited.count(None)} of 50 connections still open"
    assert httpx.get(server.url + "/ping").status_code == 200


def test_an_idle_kept_alive_connection_closes_but_a_busy_one_lives_on(server):
    sock = server.connect()
    for _ in range(5):  # 5 requests 0.3 s apart: longer than the head bound in all, each within it
        sock.sendall(b"GET /ping HTTP/1.1\r\nHost: x\r\n\r\n")
        assert response(sock).startswith(b"HTTP/1.1 200")
        time.sleep(0.3)
    sock.sendall(b"GET /ping HTTP/1.1\r\nHost: x\r\n\r\n")
    assert response(sock).startswith(b"HTTP/1.1 200")
    waited = closed_after(sock, time.monotonic(), IDLE_S + SLACK_S)
    assert waited is not None and IDLE_S * 0.6 <= waited < HEAD_S * 0.9, waited


def test_content_length_with_transfer_encoding_is_refused_and_the_connection_closed(server):
    sock = server.connect()
    sock.sendall(
        b"POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n"
        b"0\r\n\r\nGET /ping HTTP/1.1\r\nHost: x\r\n\r\n"
    )
    reply = b""
    while chunk := sock.recv(65536):
        reply += chunk
    assert reply.startswith(b"HTTP/1.1 400") and reply.count(b"HTTP/1.1") == 1  # the smuggled GET unanswered
    # either framing alone is served
    for framing in (
        b"Content-Length: 5\r\n\r\nhello",
        b"Transfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n",
    ):
        sock = server.connect()
        sock.sendall(b"POST /echo HTTP/1.1\r\nHost: x\r\n" + framing)
        assert response(sock).endswith(b'{"bytes":5}')


def secret_forms(key: str) -> set[str]:
    return {key, quote(key, safe=""), quote(key, safe="/"), "".join(f"%{b:02x}" for b in key.encode())}


def test_no_key_reaches_the_trace_level_log(server):
    def get(target: str, key: str, method: str = "GET") -> bytes:
        sock = server.connect()
        sock.sendall(f"{method} {target} HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {key}\r\n\r\n".encode())
        return response(sock)

    before = server.log.stat().st_size
    every_byte_escaped = "".join(f"%{b:02x}" for b in KEY_B.encode())
    assert get(f"/v1/users/{KEY_B}/query?api_key={KEY_B}", KEY_B).startswith(b"HTTP/1.1 200")
    assert get(f"/v1/users/{every_byte_escaped}/query", KEY_B).startswith(b"HTTP/1.1 200")
    get(f"/v1/users/{quote(KEY_A, safe='')}/query?key={quote(KEY_A, safe='')}", KEY_A)
    assert get(f"/v1/users/{UNKNOWN}/query", UNKNOWN).startswith(b"HTTP/1.1 401")
    assert get(f"/v1/users/{quote(ENV_KEY, safe='')}/query", ENV_KEY).startswith(b"HTTP/1.1 200")
    assert get(f"/v1/users/{KEY_B}/fail", KEY_B).startswith(b"HTTP/1.1 500")
    assert get("/ping", KEY_B, method=KEY_B).startswith(b"HTTP/1.1 405")
    time.sleep(0.2)
    log = server.log.read_bytes()[before:].decode()

    for key in (KEY_A, KEY_B, ENV_KEY, UNKNOWN):
        for form in secret_forms(key):
            assert form not in log, f"{form} in the log:\n{log}"
    # the lines are there, redacted: access lines, the trace lines with the ASGI scope, the app's error
    # line and the traceback that quotes the path's user id
    assert log.count("[redacted]") >= 10
    assert '"GET /v1/users/[redacted]/query?[redacted] HTTP/1.1" 200' in log
    assert "Started scope=" in log and "'query_string': b'[redacted]'" in log
    assert "memory model failed on /v1/users/[redacted]/fail" in log
    assert "RuntimeError: failed for [redacted]" in log


def test_the_lazymem_loggers_reach_the_service_log_in_uvicorns_format(server):
    before = server.log.stat().st_size
    assert httpx.get(server.url + "/log").status_code == 200
    time.sleep(0.2)
    assert re.search(r"(?m)^INFO: +indexed the new messages of 7 users$", server.log.read_text()[before:])


def test_sighup_reloads_the_keys_and_keeps_serving(server):
    def status(key: str) -> int:
        return httpx.get(
            server.url + "/v1/users/u/query", headers={"Authorization": f"Bearer {key}"}
        ).status_code

    assert status(KEY_C) == 200
    try:
        server.write_keys(f"a: {{keys: ['{KEY_A}']}}\nb: {{keys: [{KEY_B}]}}\n")  # c's key revoked
        os.kill(server.proc.pid, signal.SIGHUP)
        deadline = time.monotonic() + 5
        while status(KEY_C) != 401:
            assert time.monotonic() < deadline, "the revoked key still works"
            time.sleep(0.05)
        assert status(KEY_A) == status(KEY_B) == status(ENV_KEY) == 200

        before = server.log.stat().st_size
        server.write_keys("a: {keys: [unclosed\n")
        os.kill(server.proc.pid, signal.SIGHUP)
        deadline = time.monotonic() + 5
        while "API keys not reloaded" not in server.log.read_text()[before:]:
            assert time.monotonic() < deadline, "no line about the failed reload"
            time.sleep(0.05)
        assert status(KEY_A) == status(KEY_B) == 200 and status(KEY_C) == 401
        assert server.proc.poll() is None
    finally:
        server.write_keys()
        os.kill(server.proc.pid, signal.SIGHUP)


def test_the_bearer_token_is_read_as_fastapi_reads_it():
    assert bearer_token([(b"authorization", b"Bearer  abc ")]) == "abc"
    assert bearer_token([(b"authorization", b"bearer abc")]) == "abc"
    assert bearer_token([(b"authorization", b"Basic abc")]) is None
    assert bearer_token([(b"authorization", b"Bearer ")]) is None
    assert bearer_token([(b"host", b"x")]) is None
