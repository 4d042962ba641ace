"""Starting `lazymem serve` on a free port for tests/agent/ (and scanning folders for a canary), and running
`lazymem import` / `lazymem export` in the test's process; `refused`: a settings error as the agent
prints it."""

from __future__ import annotations

import contextlib
import io
import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from lazymem.agent import transfer
from lazymem.agent.settings import one_line
from lazymem.validate import ConfigError

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


def cli(*args: str, tmp, **kw) -> subprocess.CompletedProcess:
    """`lazymem import|export ARGS` as the command line runs it (lazymem.run hands these commands to
    transfer.main), in this process: a new process per call would cost seconds of imports each. With
    `prefix` (a command to run it under), a process of its own."""
    argv = [*args, f"paths.cache={tmp / 'cache'}"]
    if kw:
        return subprocess.run(
            [*kw.pop("prefix", ()), sys.executable, "-m", "lazymem.run", *argv],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=300,
            **kw,
        )
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = transfer.main(argv[0], argv[1:])
        except SystemExit as e:  # argparse's usage errors
            code = e.code
    return subprocess.CompletedProcess(argv, code, out.getvalue(), err.getvalue())


def write_jsonl(path: Path, texts: list[str], mode: str = "w", **fields) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, mode) as f:
        f.writelines(json.dumps({"role": "user", "text": t, **fields}) + "\n" for t in texts)
    return path


@contextlib.contextmanager
def refused(pattern: str) -> Iterator[None]:
    """pytest.raises(ConfigError, match=pattern), matched against the line the agent prints of it."""
    with pytest.raises(ConfigError) as caught:
        yield
    assert re.search(pattern, one_line(caught.value)), one_line(caught.value)
