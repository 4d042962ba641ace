"""Reading one block of the agent's config (a mapping such as `serve` or `agent.store`) key by key, each value
checked as it is read: a bad, missing or unknown key is lazymem.validate's `ConfigError`, one line naming
the key and what it expects. lazymem/agent/settings.py reads the agent's settings with it, and each store
its own keys (`check_keys`)."""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from typing import Any

from lazymem.agent.inputs import Limits, check_text
from lazymem.validate import ConfigError


class Block:
    """One mapping of the config, read key by key, each value checked as it is read (a ConfigError naming
    the key); `done()` refuses the keys no one read."""

    def __init__(self, data: Any, path: str):
        if not isinstance(data, Mapping):
            raise ConfigError([f"{path}: expected a mapping, got {show(data)}"])
        self.data, self.path, self.unread = data, path, set(data)

    def key(self, name: str) -> str:
        return f"{self.path}.{name}" if self.path else name

    def get(self, name: str) -> Any:
        if name not in self.data:
            raise ConfigError([f"{self.key(name)}: missing (conf/agent/default.yaml sets it)"])
        self.unread.discard(name)
        return self.data[name]

    def block(self, name: str) -> Block:
        return Block(self.get(name), self.key(name))

    def done(self) -> None:
        if self.unread:
            name = sorted(map(str, self.unread))[0]
            known = ", ".join(sorted(map(str, self.data.keys() - self.unread)))
            raise ConfigError([f"{self.key(name)}: unknown key (known: {known})"])

    def integer(self, name: str, least: int, most: int | None = None, why: str = "") -> int:
        value = self.get(name)
        integer = not isinstance(value, bool) and isinstance(value, int)
        if not (integer and value >= least and (most is None or value <= most)):
            bound = f">= {least}" if most is None else f"from {least} to {most}"
            raise ConfigError(
                [f"{self.key(name)}: expected an integer {bound}{_because(why)}, got {show(value)}"]
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
                [
                    f"{self.key(name)}: expected a number of seconds {bound}{null}{_because(why)}, "
                    f"got {show(value)}"
                ]
            )
        return number

    def boolean(self, name: str) -> bool:
        value = self.get(name)
        if not isinstance(value, bool):
            raise ConfigError([f"{self.key(name)}: expected true or false, got {show(value)}"])
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
            raise ConfigError([f"{self.key(name)}: expected {what}, got {show(value)}"])
        return value

    def choice(self, name: str, choices: tuple[str, ...], fold_case: bool = False) -> str:
        value = self.get(name)
        found = value.lower() if fold_case and isinstance(value, str) else value
        if found not in choices:
            raise ConfigError([f"{self.key(name)}: expected one of {', '.join(choices)}, got {show(value)}"])
        return found

    def request_id(self, name: str, limits: Limits) -> str:
        """An id that a request would also pass (lazymem.agent.inputs.check_text with max_id_chars)."""
        value = self.get(name)
        try:
            check_text("it", value, limits.max_id_chars)
        except ValueError as e:
            raise ConfigError(
                [
                    f"{self.key(name)}: expected an id as a request's (agent.limits.max_id_chars="
                    f"{limits.max_id_chars}), but {e}"
                ]
            ) from None
        return value


def _because(why: str) -> str:
    return f" ({why})" if why else ""


def show(value: Any) -> str:
    """A value as a message quotes it: null, or its repr cut to 60 characters."""
    shown = "null" if value is None else repr(value)
    return shown if len(shown) <= 60 else shown[:57] + "..."


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
