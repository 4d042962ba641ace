"""One stage's process, as the Ray task that holds its resources runs it: its command with the task's GPUs,
its output to the console and to <chain dir>/<stage>.log, a stop on request (SIGTERM to its process group,
SIGKILL after a bound), and its outcome with the stage's own error line.

The process is started from the Ray worker's main thread, where Ray runs a task's function, so that
lazymem.subproc's death signal reaches it when the worker dies. A SIGKILLed chain takes its workers down:
the local cluster's raylet and GCS share the driver's fate through PR_SET_PDEATHSIG (ray 2.60
_private/node.py:114 kernel_fate_share, _private/services.py:1040-1050), and the workers die with the
raylet; on a joined cluster the raylet kills a dead driver's workers. Measured here: the stage's process
is gone about 2 s after the SIGKILL (tests/tasks/test_chain.py). Ray's dashboard and runtime-env agents
notice the raylet's death by polling and exit about a minute later (_private/process_watcher.py:151-189).
"""

from __future__ import annotations

import json
import os
import shlex
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from ray._private.ray_constants import RAY_INTERNAL_FLAGS

from lazymem.chain.guards import leaks
from lazymem.chain.record import StageRecord
from lazymem.rundir import now
from lazymem.subproc import start

POLL_S = 0.5


@dataclass(frozen=True)
class Job:
    """What a stage's Ray task runs. `split`: the split to check its training files (glob patterns in its
    run dir, its task's) against; no check without both."""

    name: str
    cmd: tuple[str, ...]
    cwd: str
    run_dir: str
    log: str
    gpus: float = 0
    cpus: float = 1
    deps: tuple[str, ...] = ()
    split: str | None = None
    training_files: tuple[str, ...] = ()
    shared_gpus: tuple[str, ...] = ()  # GPUs outside Ray's pool it sees after its own (a judge's)
    stop_timeout_s: float = 60


def gpu_env(job: Job, gpu_ids: Sequence) -> dict[str, str]:
    """The stage's environment: the GPUs Ray gave its task (none for a CPU stage, so it cannot take a GPU
    stage's), then those kept out of Ray's pool that it may see (`shared_gpus`); without the variables that
    tie a process to the chain's raylet, which Ray strips from a submitted job too (ray 2.60
    _private/ray_constants.py:638-645 RAY_INTERNAL_FLAGS): a job that starts its own Ray (VERL) starts it
    on these GPUs, as from a shell."""
    env = {k: v for k, v in os.environ.items() if k not in RAY_INTERNAL_FLAGS}
    own = [str(i) for i in gpu_ids] if job.gpus else []
    env["CUDA_VISIBLE_DEVICES"] = ",".join([*own, *job.shared_gpus])
    return env


def _copy(stream, log) -> None:
    for line in stream:  # universal newlines: progress bars' \r updates arrive as lines
        sys.stdout.write(line)
        log.write(line)
        log.flush()


def _stop(proc: subprocess.Popen, timeout_s: float) -> int:
    """SIGTERM to the stage's process group (a lazymem run stops its servers and keeps its records), then
    SIGKILL if it is still there after `timeout_s`."""
    for sig, wait in ((signal.SIGTERM, timeout_s), (signal.SIGKILL, None)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            pass
        try:
            return proc.wait(timeout=wait)
        except subprocess.TimeoutExpired:
            continue
    return proc.wait()


def error_line(run_dir: Path, meta_before: int | None, log: Path, returncode: int) -> str:
    """The stage's own error: its meta.json's `error` when this run wrote one, else the log's last line."""
    meta = run_dir / "meta.json"
    if meta.exists() and meta.stat().st_mtime_ns != meta_before:
        try:
            error = json.loads(meta.read_text()).get("error")
        except ValueError:
            error = None
        if error:
            return " ".join(str(error).split())
    lines = [x.strip() for x in log.read_text(errors="replace").splitlines() if x.strip()]
    last = lines[-1] if lines and not lines[-1].startswith("$ ") else None
    return last or f"exit status {returncode}"


def run_job(job: Job, stopping: Callable[[], bool], gpu_ids: Sequence = ()) -> StageRecord:
    """Run the stage's command to its end (or until `stopping()`); its outcome as the chain records it."""
    started, t0 = now(), time.monotonic()
    run_dir, log_path = Path(job.run_dir), Path(job.log)
    run_dir.parent.mkdir(parents=True, exist_ok=True)
    meta = run_dir / "meta.json"
    meta_before = meta.stat().st_mtime_ns if meta.exists() else None
    stopped = False
    with open(log_path, "a", encoding="utf-8") as log:
        log.write(f"$ {shlex.join(job.cmd)}\n")
        log.flush()
        proc = start(job.cmd, gpu_env(job, gpu_ids), job.cwd)
        copier = threading.Thread(target=_copy, args=(proc.stdout, log), daemon=True)
        copier.start()
        try:
            while True:
                try:
                    returncode = proc.wait(timeout=POLL_S)
                    break
                except subprocess.TimeoutExpired:
                    pass
                if stopping():
                    stopped, returncode = True, _stop(proc, job.stop_timeout_s)
                    break
        except BaseException:  # the task itself cancelled or its worker interrupted: the stage goes too
            _stop(proc, job.stop_timeout_s)
            raise
        copier.join(timeout=10)
    duration_s = round(time.monotonic() - t0, 3)
    result = StageRecord(
        job.name, "ok", started=started, ended=now(), duration_s=duration_s, returncode=returncode
    )
    if stopped:
        return replace(result, status="interrupted", error="interrupted: the chain was stopped")
    if returncode != 0:
        return replace(result, status="failed", error=error_line(run_dir, meta_before, log_path, returncode))
    if job.split and job.training_files:
        try:
            leak = leaks(run_dir, Path(job.split), job.training_files)
        except (OSError, ValueError, KeyError) as e:
            leak = f"the test-id guard could not read {job.split} or this stage's data: {e}"
        if leak:
            return replace(result, status="failed", error=leak)
    return result
