"""API keys -> tenants, from `serve.keys_file` and the environment variable `serve.keys_env`, checked at
start-up and re-read on SIGHUP (install_reload) without stopping the service.

    # keys file (YAML)                        # environment: KEY=TENANT pairs, split at each pair's LAST `=`
    acme: {keys: [KEY, ...], retention_days: 30}      LAZYMEM_API_KEYS="c2VjcmV0MTIzNDU2Nzg5MA===acme,K2=b"

A key is printable ASCII without whitespace (what an `Authorization: Bearer KEY` header can carry and match);
a tenant name passes the checks of a request's ids and holds no `=` (the environment's form could not name
it). No error message quotes a key: each names the tenant and the key's position.

Lookups go through sha256 digests. The raw keys are kept in one place besides: `redact`, which takes them out
of log lines. A digest can only recognise a key whose boundaries are known, and a log line does not give
them (a key may sit in a path, a query, percent-encoded in any way, or inside an exception's message). The
process holds the keys anyway (os.environ keeps the variable for its lifetime; the keys file is readable to
it), so keeping them for the redaction adds no exposure beyond a dump of the process's memory.
"""

from __future__ import annotations

import asyncio
import functools
import hashlib
import logging
import os
import re
import signal
import threading
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import unquote

import yaml

from lazymem.agent.inputs import check_text
from lazymem.agent.settings import Settings, check_retention, one_line
from lazymem.validate import ConfigError

log = logging.getLogger(__name__)

REDACTED = "[redacted]"
_NOT_KEY_CHAR = re.compile(r"[^\x21-\x7e]")  # outside printable ASCII, or whitespace


# how many layers of percent-encoding `redact` looks through (a client may encode a path twice)
_ENCODINGS = 3


@dataclass(frozen=True)
class Tenant:
    name: str
    retention_days: float | None = None


@dataclass(frozen=True)
class _Keys:
    """One consistent set of keys: what a reload swaps in whole."""

    by_digest: dict[str, Tenant]
    tenants: dict[str, Tenant]
    # where a raw key starts (the longest one starting there as group 1); None: no keys
    finder: re.Pattern[str] | None


def _keys(keys: Mapping[str, Tenant], tenants: Iterable[Tenant]) -> _Keys:
    ordered = sorted(keys, key=len, reverse=True)  # the longest key that starts at a position is found
    return _Keys(
        {_digest(k): t for k, t in keys.items()},
        {t.name: t for t in (*tenants, *keys.values())},
        re.compile(f"(?=({'|'.join(map(re.escape, ordered))}))") if ordered else None,
    )


class Tenants:
    """API keys -> tenants. `all`: every tenant (with or without keys), for retention."""

    def __init__(
        self,
        keys: Mapping[str, Tenant],
        tenants: Iterable[Tenant] = (),
        read: Callable[[], tuple[dict[str, Tenant], list[Tenant]]] | None = None,
    ):
        """`keys` and the tenants without keys; `read` gives both anew for `reload` (default: the same)."""
        tenants = tuple(tenants)
        self._keys = _keys(keys, tenants)
        self._read = read or (lambda: (dict(keys), list(tenants)))

    def __len__(self) -> int:
        return len(self._keys.by_digest)

    @property
    def all(self) -> dict[str, Tenant]:
        return self._keys.tenants

    def lookup(self, key: str) -> Tenant | None:
        return self._keys.by_digest.get(_digest(key))

    def redact(self, text: str) -> str:
        """`text` with every key replaced by [redacted], as written or percent-encoded, once or more (then
        the text comes back decoded as far as it took)."""
        finder = self._keys.finder
        if finder is None:
            return text
        text = _blank(text, finder)
        decoded = text
        for _ in range(_ENCODINGS):
            if "%" not in decoded:
                break
            decoded = unquote(decoded)
            if finder.search(decoded):
                text = decoded = _blank(decoded, finder)
        return text

    @classmethod
    def load(
        cls, keys_file: str | None, keys_env: str | None, retention_days: float | None, max_id_chars: int
    ) -> Tenants:
        """From the YAML file `keys_file` and the variable `keys_env` (its tenants keep `retention_days`,
        or the file's entry of the same name); a key named twice, or a bad entry, is a ConfigError."""

        read = functools.partial(_read, keys_file, keys_env, retention_days, max_id_chars)
        return cls(*read(), read=read)

    @classmethod
    def from_settings(cls, settings: Settings) -> Tenants:
        serve, agent = settings.serve, settings.agent
        return cls.load(serve.keys_file, serve.keys_env, agent.retention_days, agent.limits.max_id_chars)

    def reload(self) -> bool:
        """Read the same sources again and swap the new keys in at once; a failed read, or one with no key
        left, keeps the old keys and logs why. Whether the keys were swapped."""
        try:
            keys, listed = self._read()
            if not keys:
                raise ConfigError(["no API keys left"])
        except (ConfigError, OSError) as e:
            log.error("API keys not reloaded, the old ones stay: %s", one_line(e))
            return False
        self._keys = _keys(keys, listed)
        log.info("API keys reloaded: %d keys of %d tenants", len(keys), len(self._keys.tenants))
        return True


def install_reload(tenants: Tenants, loop: asyncio.AbstractEventLoop) -> Callable[[], None]:
    """On SIGHUP, `tenants.reload()` in a worker thread (the loop keeps serving); what undoes it. Signals
    reach only the main thread (as uvicorn/server.py:329-333 also checks): elsewhere this does nothing.
    Without it SIGHUP's default action ends the process."""
    if threading.current_thread() is not threading.main_thread():
        return lambda: None
    loop.add_signal_handler(signal.SIGHUP, lambda: loop.run_in_executor(None, tenants.reload))
    return lambda: loop.remove_signal_handler(signal.SIGHUP)


def _read(
    keys_file: str | None, keys_env: str | None, retention_days: float | None, max_id_chars: int
) -> tuple[dict[str, Tenant], list[Tenant]]:
    """Both sources: key -> tenant, and the keys file's tenants (those without keys too)."""
    keys: dict[str, Tenant] = {}
    listed: dict[str, Tenant] = {}

    def put(key: Any, tenant: Tenant, where: str) -> None:
        if not isinstance(key, str):
            raise ConfigError([f"{where}: expected a string (quote it in YAML), got {type(key).__name__}"])
        if not key:
            raise ConfigError([f"{where}: an empty key"])
        bad = _NOT_KEY_CHAR.search(key)
        if bad is not None:
            what = "whitespace" if bad[0].isspace() else "not printable ASCII"
            raise ConfigError([f"{where}: character {bad.start() + 1} of the key is {what}"])
        if key in keys:
            raise ConfigError([f"{where}: the key is also one of tenant {keys[key].name!r}"])
        keys[key] = tenant

    def check_name(name: Any, where: str) -> None:
        try:
            check_text("the tenant name", name, max_id_chars)
        except ValueError as e:
            raise ConfigError([f"{where}: {e} (agent.limits.max_id_chars)"]) from None
        if "=" in name:
            raise ConfigError(
                [f"{where}: a tenant name may not hold '=' (the KEY=TENANT form could not name it)"]
            )

    if keys_file:
        for name, entry in _entries(keys_file).items():
            where = f"{keys_file}: tenant {_show(name)}"
            check_name(name, where)
            if not isinstance(entry, dict) or not isinstance(entry.get("keys"), list):
                raise ConfigError([f"{where} needs a list `keys`"])
            unknown = set(entry) - {"keys", "retention_days"}
            if unknown:
                raise ConfigError([f"{where} has unknown fields {sorted(map(str, unknown))}"])
            days = check_retention(entry.get("retention_days", retention_days), f"{where}, retention_days")
            tenant = listed[name] = Tenant(name, days)
            for n, key in enumerate(entry["keys"]):
                put(key, tenant, f"{where}, keys[{n}]")
    pairs = [p.strip() for p in os.environ.get(keys_env or "", "").split(",")]
    if any(pairs):
        retention_days = check_retention(retention_days, "agent.retention_days")
    for n, pair in enumerate(pairs):
        if not pair:
            continue
        key, sep, name = pair.rpartition("=")  # a base64 key ends in `=`; a tenant name holds none
        where = f"${keys_env}: pair {n}"
        if not sep or not key:
            raise ConfigError([f"{where}: expected KEY=TENANT (pairs separated by commas)"])
        where += f", tenant {_show(name)}"
        check_name(name, where)
        put(key, listed.get(name) or Tenant(name, retention_days), where)
    return keys, list(listed.values())


def _entries(keys_file: str) -> dict:
    """The keys file's mapping; a YAML error names its line, never the text there (a key)."""
    try:
        data = yaml.safe_load(Path(keys_file).read_text())
    except OSError as e:
        raise ConfigError([f"serve.keys_file: cannot read {keys_file}: {e.strerror}"]) from None
    except UnicodeDecodeError as e:
        raise ConfigError([f"serve.keys_file: {keys_file} is not UTF-8 text (byte {e.start})"]) from None
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        at = f" at line {mark.line + 1}" if mark is not None else ""
        problem = getattr(e, "problem", None) or "unreadable"
        raise ConfigError([f"{keys_file}: not valid YAML{at}: {problem}"]) from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError([f"{keys_file}: expected a mapping TENANT -> {{keys: [...], retention_days}}"])
    return data


def _blank(text: str, finder: re.Pattern[str]) -> str:
    """`text` with every key `finder` finds replaced; keys that overlap are replaced as one span."""
    spans: list[list[int]] = []
    for found in finder.finditer(text):
        start, end = found.start(), found.end(1)
        if spans and start <= spans[-1][1]:
            spans[-1][1] = max(spans[-1][1], end)
        else:
            spans.append([start, end])
    pieces, last = [], 0
    for start, end in spans:
        pieces += [text[last:start], REDACTED]
        last = end
    return "".join(pieces) + text[last:]


def _show(name: Any) -> str:
    shown = repr(name)
    return shown if len(shown) <= 40 else shown[:37] + "..."


def _digest(key: str) -> str:
    return hashlib.sha256(key.encode()).hexdigest()
