"""The agent's settings (conf/agent/default.yaml: `agent`, `serve`, `mcp`) as typed, frozen values, checked
once at start-up. A bad value raises lazymem.validate's `ConfigError` with one problem: a line naming the
key and what it expects; so does a value that a request would trip on later (a configuration never starts
and then fails every request: the MCP tenant and user pass a request's id checks, a body bound holds a
message of the longest text, ...). Unknown keys are refused too: a misspelt key would otherwise be ignored
silently. The store's keys are checked by the store class `agent.store._target_` names (`check_keys`)."""

from __future__ import annotations

import importlib
import json
import re
from dataclasses import dataclass
from typing import Any

from lazymem.agent.config_block import Block, finite, show
from lazymem.agent.inputs import Limits
from lazymem.validate import ConfigError


@dataclass(frozen=True)
class StoreSettings:
    """`agent.store`: the store class Hydra builds (`_target_`, chosen by the config group
    conf/agent/store/) and the values it checked (its `check_keys`); a value the chosen store does not take
    is None. A `_target_` of your own is passed its keys unchecked (its constructor refuses what it does not
    know)."""

    target: str
    idempotency_ttl_s: float | None = None
    forgotten_ttl_s: float | None = None
    dir: str | None = None
    dsn: str | None = None
    pool_size: int | None = None
    wait_s: float | None = None


@dataclass(frozen=True)
class TelemetrySettings:
    """`agent.telemetry`: OpenTelemetry traces and metrics over OTLP/HTTP (lazymem/agent/telemetry.py).
    `endpoint` None: $OTEL_EXPORTER_OTLP_ENDPOINT, else http://127.0.0.1:4318."""

    enabled: bool = False
    endpoint: str | None = None
    service_name: str = "lazymem"
    metrics_every_s: float = 60.0
    timeout_s: float = 5.0


@dataclass(frozen=True)
class AgentSettings:
    dir: str
    store: StoreSettings
    max_open_users: int
    max_open_messages: int
    index_lease_s: float
    retention_days: float | None
    limits: Limits
    telemetry: TelemetrySettings = TelemetrySettings()


@dataclass(frozen=True)
class ServeSettings:
    host: str
    port: int
    keys_file: str | None
    keys_env: str | None
    max_body_bytes: int
    max_import_bytes: int
    purge_every_s: float
    maintain_every_s: float
    purge_retry_s: float
    refresh_every_s: float
    index_every_s: float
    log_level: str
    header_timeout_s: float
    idle_timeout_s: float


@dataclass(frozen=True)
class McpSettings:
    tenant: str
    user: str


# The roles chat clients send ("assistant" the longest): an id bound below it refuses their messages
MIN_ID_CHARS = len("assistant")
# A user id travels percent-encoded in the URL path, up to 12 bytes a character (4 UTF-8 bytes, each %XX);
# h11 reads at most 16 KiB of request line and headers (h11/_connection.py:69,
# DEFAULT_MAX_INCOMPLETE_EVENT_SIZE; uvicorn/protocols/http/h11_impl.py:57-62 uses it): 4 KiB is left for
# the method, the rest of the path and the headers (Authorization with its key among them).
MAX_ID_CHARS = (16 * 1024 - 4 * 1024) // 12
# The longest UTF-8 encoding of one character: a body bound must hold the longest text in any script
UTF8_BYTES = 4
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
# What a configuration that still names the store by kind is told
STORE_KIND_GONE = (
    "agent.store.kind is gone: choose the store with agent/store=postgres (or agent/store=sqlite)"
)


@dataclass(frozen=True)
class Settings:
    agent: AgentSettings
    serve: ServeSettings
    mcp: McpSettings

    @classmethod
    def from_cfg(cls, cfg: Any) -> Settings:
        """From a composed config (lazymem.agent.entry.compose) or a plain mapping with the same blocks."""
        root = Block(_plain(cfg), "")
        agent = _agent(root.block("agent"))
        return cls(agent, _serve(root.block("serve"), agent.limits), _mcp(root.block("mcp"), agent.limits))


def one_line(error: Exception) -> str:
    """What an error says, in one line: a ConfigError's problems joined with "; " (what the agent's
    commands print and log), any other error's message."""
    return "; ".join(error.problems) if isinstance(error, ConfigError) else str(error)


def check_retention(days: Any, where: str) -> float | None:
    """Days to keep messages: a finite number >= 0, or None (forever). A bad value refuses the start-up:
    the purge would otherwise fail on it later, for every tenant."""
    if days is None:
        return None
    value = finite(days)
    if value is None or value < 0:
        raise ConfigError(
            [f"{where}: expected a number of days >= 0 (or null: keep forever), got {show(days)}"]
        )
    return value


def _store(store: Block) -> StoreSettings:
    """`agent.store`, its keys checked by the class its `_target_` names: a store's `check_keys(block)`
    reads them, and returns their values (lazymem/agent/sqlite_store.py, postgres_store.py). A class
    without one, or a `_target_` that does not import here, gets its keys unchecked: its constructor, or
    Hydra when the store opens, says what is wrong."""
    if "kind" in store.data:
        raise ConfigError([STORE_KIND_GONE])
    target = store.text("_target_", spaces=False)
    check_keys = getattr(_store_class(target), "check_keys", None)
    if check_keys is None:
        return StoreSettings(target)
    settings = StoreSettings(target, **check_keys(store))
    store.done()
    return settings


def _store_class(target: str) -> Any:
    """The class a `_target_` names (module.Class), or None when it does not import. Not
    hydra.utils.get_class: it logs an error for every target it cannot load, and a store of the user's own
    that does not import here is allowed."""
    module, _, name = target.rpartition(".")
    try:
        return getattr(importlib.import_module(module), name, None)
    except (ImportError, ValueError):  # ValueError: no module part
        return None


def _agent(block: Block) -> AgentSettings:
    store_settings = _store(block.block("store"))
    limits = block.block("limits")
    limits_settings = Limits(
        max_messages_per_add=limits.integer("max_messages_per_add", 1),
        max_text_chars=limits.integer("max_text_chars", 1),
        max_question_chars=limits.integer("max_question_chars", 1),
        max_id_chars=limits.integer(
            "max_id_chars",
            MIN_ID_CHARS,
            MAX_ID_CHARS,
            why="the role 'assistant' must fit, and a user id, percent-encoded, in the 16 KiB of request "
            "head the HTTP server reads",
        ),
    )
    limits.done()
    settings = AgentSettings(
        dir=block.text("dir"),
        store=store_settings,
        max_open_users=block.integer("max_open_users", 1),
        max_open_messages=block.integer("max_open_messages", 1),
        index_lease_s=block.seconds("index_lease_s"),
        retention_days=check_retention(block.get("retention_days"), block.key("retention_days")),
        limits=limits_settings,
        telemetry=_telemetry(block.block("telemetry")),
    )
    block.done()
    return settings


def _telemetry(block: Block) -> TelemetrySettings:
    endpoint = block.get("endpoint")
    if endpoint is not None and not _http_url(endpoint):
        shown = show(endpoint) if isinstance(endpoint, str) and "@" not in endpoint else "a value not shown"
        raise ConfigError(
            [
                f"{block.key('endpoint')}: expected an http:// or https:// URL such as http://127.0.0.1:4318 "
                f"(the OTLP/HTTP receiver's base; null: $OTEL_EXPORTER_OTLP_ENDPOINT), got {shown}"
            ]
        )
    settings = TelemetrySettings(
        enabled=block.boolean("enabled"),
        endpoint=endpoint,
        service_name=block.text("service_name", spaces=False),
        metrics_every_s=block.seconds("metrics_every_s"),
        timeout_s=block.seconds("timeout_s"),
    )
    block.done()
    return settings


def _http_url(value: Any) -> bool:
    """An http(s) URL with a host, no spaces, query or fragment (credentials in it are never shown)."""
    from urllib.parse import urlsplit

    if not isinstance(value, str) or re.search(r"\s", value):
        return False
    try:
        parts = urlsplit(value)
        parts.port  # noqa: B018 - raises ValueError for a port that is not a number
    except ValueError:
        return False
    return parts.scheme in ("http", "https") and bool(parts.hostname) and not (parts.query or parts.fragment)


def _serve(block: Block, limits: Limits) -> ServeSettings:
    from uvicorn.config import LOG_LEVELS  # uvicorn's level names, "trace" included (uvicorn/config.py:44-51)

    # the smallest bodies a request must be able to send: one message with the longest text, a question of
    # the longest length (each character at its longest in UTF-8)
    message = len(json.dumps({"messages": [{"role": "assistant", "text": ""}]})) + (
        UTF8_BYTES * limits.max_text_chars
    )
    question = len(json.dumps({"question": ""})) + UTF8_BYTES * limits.max_question_chars
    need = max(message, question)
    max_body = block.integer(
        "max_body_bytes",
        need,
        why="a body must hold one message of agent.limits.max_text_chars characters, or a question of "
        f"agent.limits.max_question_chars, at {UTF8_BYTES} UTF-8 bytes a character",
    )
    keys_env = block.get("keys_env")
    if keys_env is not None and not (isinstance(keys_env, str) and _ENV_NAME.fullmatch(keys_env)):
        raise ConfigError(
            [f"{block.key('keys_env')}: expected an environment variable name or null, got {show(keys_env)}"]
        )
    header_timeout = block.seconds("header_timeout_s")
    settings = ServeSettings(
        host=block.text("host", spaces=False),
        # 0: any free port, which uvicorn names in its start-up line (uvicorn/server.py:227-229)
        port=block.integer("port", 0, 65535),
        keys_file=block.text("keys_file", nullable=True),
        keys_env=keys_env,
        max_body_bytes=max_body,
        max_import_bytes=block.integer(
            "max_import_bytes", max_body, why="an import must hold a body of serve.max_body_bytes"
        ),
        purge_every_s=block.seconds("purge_every_s"),
        maintain_every_s=block.seconds("maintain_every_s"),
        purge_retry_s=block.seconds("purge_retry_s"),
        refresh_every_s=block.seconds("refresh_every_s"),
        index_every_s=block.seconds("index_every_s"),
        log_level=block.choice("log_level", tuple(LOG_LEVELS), fold_case=True),
        header_timeout_s=header_timeout,
        idle_timeout_s=block.seconds(
            "idle_timeout_s",
            most=header_timeout,
            why="serve.header_timeout_s runs as well while an idle connection waits, and would end it first",
        ),
    )
    block.done()
    return settings


def _mcp(block: Block, limits: Limits) -> McpSettings:
    settings = McpSettings(block.request_id("tenant", limits), block.request_id("user", limits))
    block.done()
    return settings


def _plain(cfg: Any) -> Any:
    """A composed OmegaConf config as plain containers, interpolations resolved."""
    from omegaconf import DictConfig, OmegaConf

    return OmegaConf.to_container(cfg, resolve=True) if isinstance(cfg, DictConfig) else cfg
