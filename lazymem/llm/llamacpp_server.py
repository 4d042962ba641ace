"""llama.cpp's OpenAI-compatible server on a GGUF file, on the CPU, as a managed server."""

from __future__ import annotations

import json
import logging
import signal
import subprocess
import sys
import urllib.request
from pathlib import Path
from typing import Any

from lazymem.llm.managed_server import LOCAL_OPENER, ManagedServer, ServerStartError, log_tail
from lazymem.llm.runtime import cpu_features, llama_build_info

log = logging.getLogger(__name__)

LLAMACPP_N_CTX = 4096  # llama.cpp's context window when the role config sets none


def _server_flags(python: str) -> str:
    """The ``--help`` text of llama_cpp.server, to see which optional flags this version has."""
    out = subprocess.run(
        [python, "-m", "llama_cpp.server", "--help"], capture_output=True, text=True, timeout=120
    )
    return out.stdout


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
            with LOCAL_OPENER.open(request, timeout=self.startup_timeout_s) as r:
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
