"""A model server as a context manager: a subprocess serving an OpenAI-compatible API, which llama.cpp's
(llamacpp_server.py) and vLLM's (vllm_server.py) build on; endpoint.py is one that someone else runs.

A managed server runs in its own process group, logs to a file, is healthy once ``GET /v1/models``
lists its served name, is restarted once if it dies mid-run (:meth:`ManagedServer.revive`), and is
stopped on every way out: context exit, exceptions, SIGTERM/SIGINT to
this process, interpreter exit, and (Linux) this process being SIGKILLed: the child asks the kernel
for SIGKILL when its parent dies (``PR_SET_PDEATHSIG``).
"""

from __future__ import annotations

import atexit
import json
import logging
import os
import signal
import socket
import subprocess
import threading
import time
import urllib.request
from pathlib import Path
from typing import Any

from lazymem import interrupt
from lazymem.subproc import death_signal_preexec

log = logging.getLogger(__name__)

_LIVE: set[ManagedServer] = set()
_PREV_HANDLERS: dict[int, Any] = {}
_HOOKS_LOCK = threading.Lock()
_ATEXIT_SET = False
LOCAL_OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}))  # health checks stay local


class ServerStartError(RuntimeError):
    """A server that exited or never became healthy; the message ends with the tail of its log."""


class ServerDied(RuntimeError):
    """A managed server that exited mid-run more often than it may be restarted."""


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def log_tail(path: Path, lines: int = 40) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"


def stop_all() -> None:
    """Stop every managed server of this process."""
    for server in list(_LIVE):
        server.stop()


interrupt.on_signal(stop_all)  # a run's SIGINT/SIGTERM handling (lazymem.interrupt) stops the servers first


def _on_signal(signum: int, frame: Any) -> None:
    stop_all()
    prev = _PREV_HANDLERS.get(signum, signal.SIG_DFL)
    if callable(prev):
        prev(signum, frame)
    elif prev != signal.SIG_IGN:
        raise KeyboardInterrupt if signum == signal.SIGINT else SystemExit(128 + signum)


def _install_hooks() -> None:
    """atexit once; SIGTERM/SIGINT handlers chained before any earlier ones (main thread only)."""
    global _ATEXIT_SET
    with _HOOKS_LOCK:
        if not _ATEXIT_SET:
            atexit.register(stop_all)
            _ATEXIT_SET = True
        if _PREV_HANDLERS or threading.current_thread() is not threading.main_thread():
            return
        for sig in (signal.SIGTERM, signal.SIGINT):
            _PREV_HANDLERS[sig] = signal.getsignal(sig)
            signal.signal(sig, _on_signal)


class ManagedServer:
    """A subprocess serving an OpenAI-compatible API on ``host:port``."""

    kind = "process"

    def __init__(
        self,
        command: list[str],
        served_name: str,
        log_dir: str | Path,
        *,
        host: str = "127.0.0.1",
        port: int | None = None,
        startup_timeout_s: float = 300.0,
        stop_timeout_s: float = 20.0,
        max_restarts: int = 1,
        env: dict[str, str] | None = None,
    ):
        self.host, self.port = host, port or free_port(host)
        self.command = [c.replace("{port}", str(self.port)).replace("{host}", host) for c in command]
        self.served_name = served_name
        self.log_path = Path(log_dir) / f"{self.kind}-{served_name.replace('/', '_')}-{self.port}.log"
        self.startup_timeout_s = startup_timeout_s
        self.stop_timeout_s = stop_timeout_s
        self.env = env or {}
        self.proc: subprocess.Popen | None = None
        self.startup_s: float | None = None
        self.max_restarts, self.restarts = max_restarts, 0
        self.died: str | None = None  # why it may not be restarted again
        self._revive_lock = threading.Lock()

    @property
    def base_url(self) -> str:
        return f"http://{self.host}:{self.port}/v1"

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc else None

    def healthy(self) -> bool:
        try:
            with LOCAL_OPENER.open(self.base_url + "/models", timeout=5) as r:
                ids = [m.get("id") for m in json.load(r).get("data", [])]
        except (OSError, ValueError, AttributeError):
            return False
        return self.served_name in ids

    def start(self) -> ManagedServer:
        if self.proc is not None:
            return self
        _install_hooks()
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        t0 = time.monotonic()
        with open(self.log_path, "ab") as logf:
            logf.write(f"$ {' '.join(self.command)}\n".encode())
            logf.flush()
            self.proc = subprocess.Popen(
                self.command,
                stdin=subprocess.DEVNULL,
                stdout=logf,
                stderr=subprocess.STDOUT,
                start_new_session=True,  # own session and process group: killpg reaches all children
                preexec_fn=death_signal_preexec(),
                env={**os.environ, **self.env},
            )
        _LIVE.add(self)
        log.info(
            "started %s (pid %d) on %s, log %s", self.served_name, self.proc.pid, self.base_url, self.log_path
        )
        try:
            self._wait_healthy()
        except BaseException:
            self.stop()
            raise
        self.startup_s = time.monotonic() - t0
        log.info("%s healthy after %.1fs", self.served_name, self.startup_s)
        return self

    def revive(self) -> None:
        """Restart the server if its process exited by itself (on the same port, so clients go on);
        :class:`ServerDied` once it has died more than ``max_restarts`` times. A stopped server stays down."""
        with self._revive_lock:
            if self.died is not None:
                raise ServerDied(self.died)
            code = self.proc.poll() if self.proc is not None else None
            if code is None:
                return
            self.stop()  # reaps what is left of its process group
            if self.restarts >= self.max_restarts:
                self.died = (
                    f"{self.kind} server for {self.served_name!r} died (exit code {code}) after "
                    f"{self.restarts} restart(s); log {self.log_path}:\n{log_tail(self.log_path, 15)}"
                )
                raise ServerDied(self.died)
            self.restarts += 1
            log.warning(
                "%s server died (exit code %s); restarting it (%d of %d), log %s",
                self.served_name,
                code,
                self.restarts,
                self.max_restarts,
                self.log_path,
            )
            self.start()

    def _wait_healthy(self) -> None:
        deadline = time.monotonic() + self.startup_timeout_s
        while time.monotonic() < deadline:
            assert self.proc is not None
            code = self.proc.poll()
            if code is not None:
                raise ServerStartError(
                    f"{self.kind} server for {self.served_name!r} exited with code {code} before becoming "
                    f"healthy; log {self.log_path}:\n{log_tail(self.log_path)}"
                )
            if self.healthy():
                return
            time.sleep(0.5)
        raise ServerStartError(
            f"{self.kind} server for {self.served_name!r} not healthy after {self.startup_timeout_s:g}s "
            f"(GET {self.base_url}/models); log {self.log_path}:\n{log_tail(self.log_path)}"
        )

    def stop(self) -> None:
        """SIGTERM to the whole group, SIGKILL after ``stop_timeout_s``, then SIGKILL any leftovers."""
        proc, self.proc = self.proc, None
        _LIVE.discard(self)
        if proc is None:
            return
        for sig, wait in ((signal.SIGTERM, self.stop_timeout_s), (signal.SIGKILL, 10.0)):
            try:
                os.killpg(proc.pid, sig)
            except ProcessLookupError:
                break
            try:
                proc.wait(wait)
                break
            except subprocess.TimeoutExpired:
                continue
        try:  # children (vLLM workers) may outlive the group leader
            os.killpg(proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        log.info("stopped %s (pid %d)", self.served_name, proc.pid)

    def __enter__(self) -> ManagedServer:
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()
