"""Build the servers and clients for the LLM roles of a job (memory, answer, judge, teacher, ...).

The config (``conf/llm/*.yaml``) has a ``common`` block that every role starts from and a ``roles``
block whose entries override single keys. A role config names its backend (``lazymem.llm.backends``),
which says how its server starts and how requests are worded. Roles with equal server specs share one
server through :class:`ServerRegistry`; each role gets its own client (its own decoding, concurrency,
timeout and retries) and all clients share one cache.
"""

from __future__ import annotations

import copy
import threading
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from lazymem.llm.backends import Backend, backend_class, get_backend
from lazymem.llm.cache import LLMCache, canonical_json
from lazymem.llm.client import ClientConfig, Decoding, LLMClient

_CLIENT_KEYS = (
    "concurrency",
    "timeout_s",
    "max_retries",
    "backoff_base_s",
    "backoff_cap_s",
    "structured",
    "context_policy",
)


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
    """`common` merged with the role's entry. A role the preset does not list (one a method of your own
    declares) runs on `common` as it is: the preset's main server and decoding."""
    cfg = to_dict(cfg)
    rc = merge(cfg.get("common", {}), (cfg.get("roles") or {}).get(role) or {})
    try:
        backend_class(rc.get("backend"))
    except ValueError as e:
        raise ValueError(f"role {role}: {e}") from None
    return rc


class ServerRegistry:
    """One server per backend server spec (backend, model, served name, options) for the life of a job."""

    def __init__(self, log_dir: str | Path, model_cache_dir: str | Path | None = None):
        self.log_dir = Path(log_dir)
        self.model_cache_dir = Path(model_cache_dir) if model_cache_dir else None
        self._servers: dict[str, Any] = {}
        self._lock = threading.Lock()

    def get(self, backend: Backend):
        """The started server of a (resolved) backend, shared with every backend of the same spec."""
        key = canonical_json(backend.server_spec())
        with self._lock:
            if key not in self._servers:
                self._servers[key] = backend.server(self.log_dir, self.model_cache_dir).start()
            return self._servers[key]

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

    def __init__(
        self, cfg: Mapping[str, Any], log_dir: str | Path, registry: ServerRegistry | None = None, cache=None
    ):
        """`cache`: a response cache to use instead of the SQLite file at `cache_path` (an object with
        LLMCache's get / put / stats / close: the agent memory passes a server database's rows)."""
        self.cfg = to_dict(cfg)
        # `is None`, not `or`: a shared registry with no server started yet is empty, hence falsy
        self.registry = (
            registry if registry is not None else ServerRegistry(log_dir, self.cfg.get("model_cache_dir"))
        )
        self._own_registry = registry is None
        path = self.cfg.get("cache_path")
        if not self.cfg.get("cache", True):
            self.cache = None
        elif cache is not None:
            self.cache = cache
        else:
            self.cache = LLMCache(path) if path else None
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
        try:
            return build_client(rc, self.registry, self.cache)
        except ValueError as e:
            raise ValueError(f"role {role}: {e}") from None

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
        """Close the clients this set opened, its own servers, and the cache."""
        with self._lock:
            clients, self._clients = list(self._clients.values()), {}
        for client in clients:
            client.close()
        if self._own_registry:
            self.registry.close()
        if self.cache is not None:
            self.cache.close()

    def __enter__(self) -> LLMSet:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


def build_client(rc: dict[str, Any], registry: ServerRegistry, cache: LLMCache | None = None) -> LLMClient:
    """The client of one role config (its server started through ``registry``)."""
    backend = get_backend(rc).resolve()
    server = registry.get(backend)
    cc = ClientConfig(
        base_url=server.base_url,
        served_name=backend.served_name,
        model_id=backend.model_id(),
        api_key_env=backend.api_key_env(),
        dialect=backend.dialect,
        decoding=Decoding(**(rc.get("decoding") or {})),
        extra_body=rc.get("extra_body") or {},
        context_tokens=backend.context_tokens(),
        **{k: rc[k] for k in _CLIENT_KEYS if rc.get(k) is not None},
    )
    return LLMClient(cc, cache=cache, server=server)


def build_llms(cfg: Mapping[str, Any], log_dir: str | Path, registry: ServerRegistry | None = None) -> LLMSet:
    """Clients for every role in ``cfg`` (servers start when a role is first used)."""
    return LLMSet(cfg, log_dir, registry)
