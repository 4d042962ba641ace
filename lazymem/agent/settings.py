"""The agent's settings (conf/agent/default.yaml: `agent`, `serve`, `mcp`) as typed, frozen values, checked
once at start-up. A bad value raises `ConfigError`, one line naming the key and what it expects; so does a
value that a request would trip on later (a configuration never starts and then fails every request: the
MCP tenant and user pass a request's id checks, a body bound holds a message of the longest text, ...).
Unknown keys are refused too: a misspelt key would otherwise be ignored silently."""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from lazymem.agent.inputs import Limits, check_text


class ConfigError(ValueError):
    """A setting is missing, unknown or out of its range; the message is one line naming the key."""


@dataclass(frozen=True)
class StoreSettings:
    """`agent.store`: the store class Hydra builds (`_target_`, chosen by the config group
    conf/agent/store/) and its checked values; a value the chosen store does not take is None. A
    `_target_` of your own is passed its keys unchecked (its constructor refuses what it does not know)."""

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
SQLITE_STORE = "lazymem.agent.sqlite_store.SQLiteStore"
POSTGRES_STORE = "lazymem.agent.postgres_store.PostgresStore"
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
        root = _Block(_plain(cfg), "")
        agent = _agent(root.block("agent"))
        return cls(agent, _serve(root.block("serve"), agent.limits), _mcp(root.block("mcp"), agent.limits))


def check_retention(days: Any, where: str) -> float | None:
    """Days to keep messages: a finite number >= 0, or None (forever). A bad value refuses the start-up:
    the purge would otherwise fail on it later, for every tenant."""
    if days is None:
        return None
    value = finite(days)
    if value is None or value < 0:
        raise ConfigError(
            f"{where}: expected a number of days >= 0 (or null: keep forever), got {_show(days)}"
        )
    return value


def finite(value: Any) -> float | None:
    """`value` as a finite float; None for what is not a number (a bool is not), for NaN and the
    infinities, and for an integer too large for a float (which `float()` refuses with OverflowError)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    try:
        number = float(value)
    except OverflowError:
        return None
    return number if math.isfinite(number) else None


def refuse_gone_overrides(overrides: Sequence[str]) -> None:
    """Refuse, before composing, an override of a key that no longer exists and has a new form (Hydra's
    own error would only say that the key is not in the config)."""
    for override in overrides:
        if override.lstrip("+~").split("=", 1)[0] == "agent.store.kind":
            raise ConfigError(STORE_KIND_GONE)


def _store(store: _Block) -> StoreSettings:
    """`agent.store`, checked by the keys of the store its `_target_` names."""
    if "kind" in store.data:
        raise ConfigError(STORE_KIND_GONE)
    target = store.text("_target_", spaces=False)
    if target == SQLITE_STORE:
        settings = StoreSettings(
            target,
            store.seconds("idempotency_ttl_s"),
            store.seconds("forgotten_ttl_s", nullable=True),
            dir=store.text("dir"),
        )
    elif target == POSTGRES_STORE:
        dsn = store.get("dsn")
        _check_dsn(dsn, store.key("dsn"))
        settings = StoreSettings(
            target,
            store.seconds("idempotency_ttl_s"),
            store.seconds("forgotten_ttl_s", nullable=True),
            dsn=dsn,
            pool_size=store.integer("pool_size", 1),
            wait_s=store.seconds("wait_s"),
        )
    else:  # a store of your own: its keys are its constructor's to check
        return StoreSettings(target)
    store.done()
    return settings


def _agent(block: _Block) -> AgentSettings:
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


def _telemetry(block: _Block) -> TelemetrySettings:
    endpoint = block.get("endpoint")
    if endpoint is not None and not _http_url(endpoint):
        shown = _show(endpoint) if isinstance(endpoint, str) and "@" not in endpoint else "a value not shown"
        raise ConfigError(
            f"{block.key('endpoint')}: expected an http:// or https:// URL such as http://127.0.0.1:4318 "
            f"(the OTLP/HTTP receiver's base; null: $OTEL_EXPORTER_OTLP_ENDPOINT), got {shown}"
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


def _serve(block: _Block, limits: Limits) -> ServeSettings:
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
            f"{block.key('keys_env')}: expected an environment variable name or null, got {_show(keys_env)}"
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


def _mcp(block: _Block, limits: Limits) -> McpSettings:
    settings = McpSettings(block.request_id("tenant", limits), block.request_id("user", limits))
    block.done()
    return settings


def _check_dsn(dsn: Any, key: str) -> None:
    """A PostgreSQL connection string that parses; never quoted back, as it may hold a password."""
    expected = f"{key}: expected a PostgreSQL connection string such as postgresql://USER@HOST:PORT/DB"
    if not isinstance(dsn, str) or not dsn.strip():
        shown = _show(dsn) if dsn is None or isinstance(dsn, str) else type(dsn).__name__  # blank or no text
        raise ConfigError(f"{expected} (agent/store=postgres needs one), got {shown}")
    from psycopg import ProgrammingError
    from psycopg.conninfo import conninfo_to_dict

    try:
        conninfo_to_dict(dsn)
    except ProgrammingError:
        raise ConfigError(
            f"{expected}; this one does not parse (not shown: it may hold a password)"
        ) from None


class _Block:
    """One mapping of the config, read key by key; `done()` refuses the keys no one read."""

    def __init__(self, data: Any, path: str):
        if not isinstance(data, Mapping):
            raise ConfigError(f"{path}: expected a mapping, got {_show(data)}")
        self.data, self.path, self.unread = data, path, set(data)

    def key(self, name: str) -> str:
        return f"{self.path}.{name}" if self.path else name

    def get(self, name: str) -> Any:
        if name not in self.data:
            raise ConfigError(f"{self.key(name)}: missing (conf/agent/default.yaml sets it)")
        self.unread.discard(name)
        return self.data[name]

    def block(self, name: str) -> _Block:
        return _Block(self.get(name), self.key(name))

    def done(self) -> None:
        if self.unread:
            name = sorted(map(str, self.unread))[0]
            known = ", ".join(sorted(map(str, self.data.keys() - self.unread)))
            raise ConfigError(f"{self.key(name)}: unknown key (known: {known})")

    def integer(self, name: str, least: int, most: int | None = None, why: str = "") -> int:
        value = self.get(name)
        integer = not isinstance(value, bool) and isinstance(value, int)
        if not (integer and value >= least and (most is None or value <= most)):
            bound = f">= {least}" if most is None else f"from {least} to {most}"
            raise ConfigError(
                f"{self.key(name)}: expected an integer {bound}{_because(why)}, got {_show(value)}"
            )
        return value

    def seconds(
        self, name: str, most: float = math.inf, why: str = "", nullable: bool = False
    ) -> float | None:
        """A finite number > 0 (and at most `most`); with `nullable`, or null."""
        value = self.get(name)
        if value is None and nullable:
            return None
        number = finite(value)
        if number is None or not 0 < number <= most:
            bound = "> 0" if most == math.inf else f"> 0 and at most {most:g}"
            null = " (or null)" if nullable else ""
            raise ConfigError(
                f"{self.key(name)}: expected a number of seconds {bound}{null}{_because(why)}, "
                f"got {_show(value)}"
            )
        return number

    def boolean(self, name: str) -> bool:
        value = self.get(name)
        if not isinstance(value, bool):
            raise ConfigError(f"{self.key(name)}: expected true or false, got {_show(value)}")
        return value

    def text(self, name: str, nullable: bool = False, spaces: bool = True) -> str | None:
        value = self.get(name)
        if value is None and nullable:
            return None
        if not isinstance(value, str) or not value.strip() or (not spaces and re.search(r"\s", value)):
            what = (
                "a non-empty string"
                + ("" if spaces else " without spaces")
                + (" or null" if nullable else "")
            )
            raise ConfigError(f"{self.key(name)}: expected {what}, got {_show(value)}")
        return value

    def choice(self, name: str, choices: tuple[str, ...], fold_case: bool = False) -> str:
        value = self.get(name)
        found = value.lower() if fold_case and isinstance(value, str) else value
        if found not in choices:
            raise ConfigError(f"{self.key(name)}: expected one of {', '.join(choices)}, got {_show(value)}")
        return found

    def request_id(self, name: str, limits: Limits) -> str:
        """An id that a request would also pass (lazymem.agent.inputs.check_text with max_id_chars)."""
        value = self.get(name)
        try:
            check_text("it", value, limits.max_id_chars)
        except ValueError as e:
            raise ConfigError(
                f"{self.key(name)}: expected an id as a request's (agent.limits.max_id_chars="
                f"{limits.max_id_chars}), but {e}"
            ) from None
        return value


def _because(why: str) -> str:
    return f" ({why})" if why else ""


def _show(value: Any) -> str:
    shown = "null" if value is None else repr(value)
    return shown if len(shown) <= 60 else shown[:57] + "..."


def _plain(cfg: Any) -> Any:
    """A composed OmegaConf config as plain containers, interpolations resolved."""
    from omegaconf import DictConfig, OmegaConf

    return OmegaConf.to_container(cfg, resolve=True) if isinstance(cfg, DictConfig) else cfg
