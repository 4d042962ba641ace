"""What one call to the agent memory may carry, checked once for every interface (Python, HTTP, MCP, the
import CLI): the limits (conf/agent `agent.limits`) and the checks that turn a malformed argument into
`BadInput` before anything is stored or deleted. The rules (docs/agent-contract.md): unknown fields are
refused, ids are integers and nothing else (no "13", 12.0 or true), text is a non-empty valid string."""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from lazymem.agent.errors import BadInput
from lazymem.agent.store import MAX_ID, NewMessage

__all__ = ["BadInput", "Limits", "check_text", "check_message_ids", "request_digest"]

DEFAULT_SESSION = "default"
# Characters no store can hold: NUL, and UTF-16 surrogates (in a str, always unpaired: JSON's "\\ud800")
_NOT_TEXT = re.compile("[\x00\ud800-\udfff]")
# The fields of a message in an add, and those an import may carry as well
MESSAGE_FIELDS = ("role", "text", "time", "session_id")
IMPORT_FIELDS = (*MESSAGE_FIELDS, "source", "aliases", "vectors")
# What an export's messages also carry, which an import of them ignores: ids are new, retention counts
# from the import, and the caller names the user
EXPORT_ONLY_FIELDS = ("id", "added", "user_id")


@dataclass(frozen=True)
class Limits:
    """Bounds on what one call may carry (conf/agent.yaml `agent.limits`)."""

    max_messages_per_add: int = 1000
    max_text_chars: int = 20000
    max_question_chars: int = 4000
    max_id_chars: int = 200

    def check_ids(self, tenant: str, user_id: str) -> None:
        check_text("tenant", tenant, self.max_id_chars)
        check_text("user_id", user_id, self.max_id_chars)

    def check_messages(
        self,
        messages: Sequence[Mapping[str, Any]],
        now: str,
        first: int = 0,
        allowed: Sequence[str] = MESSAGE_FIELDS,
        name=None,
        ignored: Sequence[str] = (),
    ) -> list[NewMessage]:
        """The batch as NewMessages (`time` defaults to `now`). `first`: the position of messages[0] in what
        the caller sends (an import's batches); `name(n)` names the message at position n in an error
        (default "message n"). `allowed`: the fields a message may have (an import's also carry `source`,
        `aliases` and `vectors`); `ignored`: fields it may carry and that are not read (an import's:
        EXPORT_ONLY_FIELDS)."""
        if isinstance(messages, (str, bytes, Mapping)) or not isinstance(messages, Sequence) or not messages:
            raise BadInput("messages must be a non-empty list")
        if len(messages) > self.max_messages_per_add:
            raise BadInput(f"at most {self.max_messages_per_add} messages per add, got {len(messages)}")
        name = name or (lambda n: f"message {n}")
        batch = []
        for n, m in enumerate(messages, first):
            if not isinstance(m, Mapping):
                raise BadInput(f"{name(n)}: must be an object with role and text")
            unknown = sorted(set(m) - set(allowed) - set(ignored), key=str)
            if unknown:
                raise BadInput(f"{name(n)}: unknown fields {unknown}; a message has {list(allowed)}")
            fields = {"role": m.get("role"), "text": m.get("text")}
            for key in ("time", "session_id"):
                if m.get(key) is not None:
                    fields[key] = m[key]
            for key, value in fields.items():
                bound = self.max_text_chars if key == "text" else self.max_id_chars
                check_text(f"{name(n)}: {key}", value, bound)
            fields.setdefault("time", now)
            fields.setdefault("session_id", DEFAULT_SESSION)
            source, aliases = m.get("source"), m.get("aliases") or ()
            if source is not None:
                check_text(f"{name(n)}: source", source, self.max_id_chars)
            if isinstance(aliases, (str, bytes)) or not isinstance(aliases, Sequence):
                raise BadInput(f"{name(n)}: aliases must be a list of strings")
            for alias in aliases:
                check_text(f"{name(n)}: aliases", alias, self.max_id_chars)
            batch.append(NewMessage(**fields, source=source, aliases=tuple(aliases)))
        return batch


def check_text(name: str, value: Any, max_chars: int) -> None:
    """A non-empty string within `max_chars` that is valid Unicode text: JSON can carry a lone surrogate
    (`"\\ud800"`) or a NUL, which no store can hold; the reason never quotes the value."""
    if not isinstance(value, str) or not value.strip():
        raise BadInput(f"{name} must be a non-empty string")
    if len(value) > max_chars:
        raise BadInput(f"{name} is longer than {max_chars} characters")
    bad = _NOT_TEXT.search(value)
    if bad is not None:
        raise BadInput(f"{name} is not valid text: a lone surrogate or NUL at position {bad.start()}")


def check_message_ids(ids: Any) -> list[int]:
    """A forget's ids as a list: any iterable of integers from 1 to MAX_ID (read once, so a generator
    works); a str, a mapping, a bool, a float or a numeric string is refused, never converted."""
    if ids is None:
        raise BadInput("message_ids is required; to delete every message of the user, use forget_all")
    if isinstance(ids, (str, bytes, Mapping)) or not isinstance(ids, Iterable):
        raise BadInput(f"message_ids must be a list of integers, got {type(ids).__name__}")
    ids = list(ids)
    for n, i in enumerate(ids):
        if type(i) is not int or not 0 < i <= MAX_ID:
            shown = type(i).__name__ if type(i) is not int else i
            raise BadInput(f"message_ids[{n}]: expected an integer from 1 to {MAX_ID}, got {shown}")
    return ids


def check_key(name: str, value: Any, max_chars: int) -> str | None:
    """An optional opaque key (an idempotency key): None, or printable ASCII without spaces."""
    if value is None:
        return None
    check_text(name, value, max_chars)
    if not value.isascii() or not value.isprintable() or " " in value:
        raise BadInput(f"{name} must be printable ASCII without spaces")
    return value


def request_digest(messages: Sequence[Mapping[str, Any]]) -> str:
    """The digest an idempotency key is remembered with: the messages as the client sent them (before any
    default is filled in, so that a retry a second later has the same digest)."""
    canonical = [{k: m.get(k) for k in MESSAGE_FIELDS} for m in messages]
    return hashlib.sha256(json.dumps(canonical, ensure_ascii=False, sort_keys=True).encode()).hexdigest()
