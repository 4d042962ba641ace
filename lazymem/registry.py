"""A class a config names: a registered name, or the dotted import path of a subclass of your own.

LLM backends (`backend:`) and judge styles (`judge.style:`) are chosen this way, so an extension is a
module of yours plus a config line, with no edit of lazymem.
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from typing import Any, TypeVar

T = TypeVar("T")


def named_class(value: Any, registered: Mapping[str, type[T]], base: type[T], key: str) -> type[T]:
    """`registered[value]`, or the `base` subclass at the import path `value`; a ValueError naming `key`
    (the config key) and what is allowed otherwise."""
    if isinstance(value, str) and value in registered:
        return registered[value]
    kind = f"{base.__module__}.{base.__name__}"
    allowed = f"allowed values are {', '.join(registered)}, or the import path of a {base.__name__} class"
    if not isinstance(value, str) or "." not in value:
        raise ValueError(f"{key} = {value!r}: {allowed}")
    module, _, attr = value.rpartition(".")
    try:
        cls = getattr(importlib.import_module(module), attr)
    except (ImportError, AttributeError) as e:
        raise ValueError(f"{key} = {value!r} cannot be imported ({e}); {allowed}") from None
    if not (isinstance(cls, type) and issubclass(cls, base)):
        raise ValueError(f"{key} = {value!r} is not a subclass of {kind}")
    return cls
