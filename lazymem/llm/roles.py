"""Build the servers and clients for the LLM roles of a job (memory, answer, judge, teacher, ...).

The config (``conf/llm/*.yaml``) has a ``common`` block that every role starts from and a ``roles``
block whose entries override single keys. Roles naming the same backend, model, served name and
server options share one server through :class:`ServerRegistry`; each role gets its own client
(its own decoding, concurrency, timeout and retries) and all clients share one cache.
"""

from __future__ import annotations

import copy
import shutil
import subprocess
import threading
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from lazymem.llm.cache import LLMCache, canonical_json
from lazymem.llm.client import ClientConfig, Decoding, LLMClient
from lazymem.llm.models import model_identity, resolve_model
from lazymem.llm.servers import Endpoint, LlamaCppServer, ManagedServer, VllmServer

BACKENDS = ("llamacpp", "vllm", "endpoint", "auto")
_CLIENT_KEYS = ("concurrency", "timeout_s", "max_retries", "backoff_base_s", "backoff_cap_s", "structured")


def to_dict(cfg: Any) -> dict[str, Any]:
    """A plain dict from a dict or an OmegaConf config (interpolations resolved)."""
    if isinstance(cfg, Mapping) and type(cfg).__module__.split(".")[0] != "omegaconf":
        return copy.deepcopy(dict(cfg))
    from omegaconf import OmegaConf

    return OmegaConf.to_container(cfg, resolve=True)  # type: ignore[return-value]


def merge(base: dict[str, Any], over: dict[str, Any]) -> dict[str, Any]:
    """Recursive merge: dicts merge key by key, anything else in ``over`` replaces."""
    out = copy.deepcopy(base)
    for k, v in (over or {}).items():
        out[k] = (
            merge(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) else copy.deepcopy(v)
        )
    return out


def role_config(cfg: Mapping[str, Any], role: str) -> dict[str, Any]:
    cfg = to_dict(cfg)
    if role not in cfg.get("roles", {}):
        raise KeyError(f"no LLM role {role!r}; configured: {sorted(cfg.get('roles', {}))}")
    rc = merge(cfg.get("common", {}), cfg["roles"][role] or {})
    if rc.get("backend") not in BACKENDS:
        raise ValueError(f"role {role}: backend {rc.get('backend')!r} not in {BACKENDS}")
    return rc


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


def _is_gguf(model: str) -> bool:
    return model.startswith("bundled:") or model.endswith(".gguf")


def choose_backend(rc: dict[str, Any]) -> tuple[str, str]:
    """(backend, model) after resolving ``auto``: vLLM when a GPU and a local model directory are
    present, otherwise llama.cpp on ``fallback_gguf`` (or ``model`` when that is already a GGUF)."""
    backend, model = rc["backend"], str(rc.get("model") or "")
    if backend != "auto":
        return backend, model
    if model and not _is_gguf(model) and Path(model).expanduser().is_dir() and has_gpu():
        return "vllm", model
    fallback = rc.get("fallback_gguf") or (model if _is_gguf(model) else None)
    if not fallback:
        raise ValueError(f"backend auto fell back to llama.cpp but no GGUF is configured (model={model!r})")
    return "llamacpp", str(fallback)


class ServerRegistry:
    """One server per (backend, model, served name, options) for the life of a job."""

    def __init__(self, log_dir: str | Path, model_cache_dir: str | Path | None = None):
        self.log_dir = Path(log_dir)
        self.model_cache_dir = Path(model_cache_dir) if model_cache_dir else None
        self._servers: dict[str, ManagedServer | Endpoint] = {}
        self._lock = threading.Lock()

    def get(self, backend: str, model: str, served_name: str, options: dict[str, Any] | None = None):
        options = options or {}
        key = canonical_json([backend, model, served_name, options])
        with self._lock:
            if key not in self._servers:
                self._servers[key] = self._make(backend, model, served_name, options).start()
            return self._servers[key]

    def _make(self, backend: str, model: str, served_name: str, options: dict[str, Any]):
        if backend == "llamacpp":
            return LlamaCppServer(
                resolve_model(model, self.model_cache_dir), served_name, self.log_dir, **options
            )
        if backend == "vllm":
            return VllmServer(model, served_name, self.log_dir, **options)
        if backend == "endpoint":
            return Endpoint(served_name=served_name, **options)
        raise ValueError(f"unknown backend {backend!r}")

    def __len__(self) -> int:
        return len(self._servers)

    def revive(self) -> None:
        """Restart any managed server that died since the last look (each at most ``max_restarts`` times)."""
        with self._lock:
            servers = list(self._servers.values())
        for server in servers:
            server.revive()

    def restarts(self) -> dict[str, int]:
        with self._lock:
            return {s.served_name: s.restarts for s in self._servers.values() if s.kind != "endpoint"}

    def close(self) -> None:
        with self._lock:
            servers, self._servers = list(self._servers.values()), {}
        for server in reversed(servers):
            server.stop()

    def __enter__(self) -> ServerRegistry:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


class LLMSet:
    """Clients for the configured roles, created (and their servers started) on first use."""

    def __init__(self, cfg: Mapping[str, Any], log_dir: str | Path, registry: ServerRegistry | None = None):
        self.cfg = to_dict(cfg)
        self.registry = registry or ServerRegistry(log_dir, self.cfg.get("model_cache_dir"))
        self._own_registry = registry is None
        path = self.cfg.get("cache_path")
        self.cache = LLMCache(path) if self.cfg.get("cache", True) and path else None
        self._clients: dict[str, LLMClient] = {}
        self._lock = threading.Lock()

    @property
    def roles(self) -> list[str]:
        return list(self.cfg.get("roles", {}))

    def __getitem__(self, role: str) -> LLMClient:
        with self._lock:
            if role not in self._clients:
                self._clients[role] = self._build(role)
            return self._clients[role]

    def _build(self, role: str) -> LLMClient:
        rc = role_config(self.cfg, role)
        backend, model = choose_backend(rc)
        served = rc["served_name"]
        if backend == "endpoint":
            if not rc.get("base_url"):
                raise ValueError(f"role {role}: backend endpoint needs base_url")
            server = self.registry.get(backend, model, served, {"base_url": rc["base_url"]})
            model_id = rc.get("model_id") or f"{rc['base_url']}#{served}"
        else:
            server = self.registry.get(backend, model, served, rc.get(backend) or {})
            model_id = rc.get("model_id") or model_identity(model)
        dialect = {"llamacpp": "llamacpp", "vllm": "vllm"}.get(backend, rc.get("dialect") or "openai")
        cc = ClientConfig(
            base_url=server.base_url,
            served_name=served,
            model_id=model_id,
            api_key_env=rc.get("api_key_env") if backend == "endpoint" else None,
            dialect=dialect,
            decoding=Decoding(**(rc.get("decoding") or {})),
            extra_body=rc.get("extra_body") or {},
            **{k: rc[k] for k in _CLIENT_KEYS if rc.get(k) is not None},
        )
        return LLMClient(cc, cache=self.cache, server=server)

    def revive(self) -> None:
        """Between questions: restart a managed server that died (once); a second death raises ServerDied."""
        self.registry.revive()

    def stats(self) -> dict[str, Any]:
        out: dict[str, Any] = {role: c.stats() for role, c in self._clients.items()}
        if self.cache is not None:
            out["cache"] = self.cache.stats()
        out["server_restarts"] = self.registry.restarts()
        return out

    def close(self) -> None:
        if self._own_registry:
            self.registry.close()
        if self.cache is not None:
            self.cache.close()

    def __enter__(self) -> LLMSet:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


def build_llms(cfg: Mapping[str, Any], log_dir: str | Path, registry: ServerRegistry | None = None) -> LLMSet:
    """Clients for every role in ``cfg`` (servers start when a role is first used)."""
    return LLMSet(cfg, log_dir, registry)
