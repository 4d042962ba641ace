"""Starting `lazymem serve` on a free port for tests/agent/ (and scanning folders for a canary)."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx

from helpers import ROOT


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Service:
    """`python -m lazymem.run serve OVERRIDES` in its own process group, its output in `log`."""

    def __init__(self, tmp: Path, *overrides: str, env: dict | None = None, startup_s: float = 180):
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = tmp / f"service-{self.port}.log"
        args = [f"serve.port={self.port}", f"agent.dir={tmp / 'data'}", f"paths.cache={tmp / 'cache'}"]
        with open(self.log, "ab") as out:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "lazymem.run", "serve", *args, *overrides],
                cwd=ROOT,
                stdout=out,
                stderr=subprocess.STDOUT,
                env={**os.environ, **(env or {})},
                start_new_session=True,
            )
        deadline = time.monotonic() + startup_s
        while True:
            try:
                if httpx.get(self.url + "/health", timeout=2).status_code == 200:
                    return
            except httpx.TransportError:
                pass
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"service did not start:\n{self.log.read_text()[-3000:]}")
            time.sleep(0.3)

    def kill(self) -> None:
        """SIGKILL, as a crash would."""
        os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait()

    def stop(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.kill()


def files_containing(needle: bytes, *dirs: Path) -> list[Path]:
    return [p for d in dirs for p in sorted(d.rglob("*")) if p.is_file() and needle in p.read_bytes()]
