"""Child processes that must not outlive lazymem: model servers and the trainers (LLaMA-Factory, VERL).

Each child gets its own process group (so a kill reaches its workers too) and, on Linux, asks the kernel
for SIGKILL when lazymem dies (``PR_SET_PDEATHSIG``), so even a SIGKILLed run leaves nothing behind.
"""

from __future__ import annotations

import ctypes
import os
import shlex
import signal
import subprocess
import sys
import threading
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

_PR_SET_PDEATHSIG = 1


def death_signal_preexec() -> Callable[[], None] | None:
    """A preexec_fn that makes the child receive SIGKILL when this process dies (Linux only).

    The kernel sends it when the *thread* that forked dies, so it is only set up from the main thread.
    libc is loaded here, before the fork; the child only calls into it.
    """
    if sys.platform != "linux" or threading.current_thread() is not threading.main_thread():
        return None
    prctl = ctypes.CDLL(None, use_errno=True).prctl
    parent = os.getpid()

    def preexec() -> None:
        prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)  # a server mid-request may ignore SIGTERM
        if os.getppid() != parent:  # the parent died before prctl took effect
            os.kill(os.getpid(), signal.SIGKILL)

    return preexec


def start(
    cmd: Sequence[str], env: Mapping[str, str] | None = None, cwd: str | None = None
) -> subprocess.Popen:
    """`cmd` in a process group of its own that dies with this process, its output (stderr too) a text pipe
    read line by line."""
    return subprocess.Popen(
        list(cmd),
        cwd=cwd,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        errors="replace",
        bufsize=1,
        start_new_session=True,
        preexec_fn=death_signal_preexec(),
        env=dict(env) if env is not None else None,
    )


def stream(cmd: Sequence[str], log_path: Path, env: Mapping[str, str] | None = None) -> int:
    """Run ``cmd`` to the end, copying its output line by line to our stdout and to ``log_path``.

    Returns the exit status. If lazymem is interrupted meanwhile, the child's whole process group is
    killed before the exception goes on.
    """
    with open(log_path, "w", encoding="utf-8") as logf:
        logf.write(f"$ {shlex.join(cmd)}\n")
        proc = start(cmd, env)
        try:
            for line in proc.stdout:  # universal newlines: progress bars' \r updates arrive as lines
                sys.stdout.write(line)
                logf.write(line)
                logf.flush()
            return proc.wait()
        except BaseException:
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            proc.wait()
            raise
