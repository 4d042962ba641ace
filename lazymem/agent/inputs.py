"""What one call to the agent memory may carry: the limits (conf/agent `agent.limits`) and the checks that
turn a malformed argument into `BadInput` before anything is stored or deleted."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from lazymem.agent.store import NewMessage

DEFAULT_SESSION = "default"
# Characters no store can hold: NUL, and UTF-16 surrogates (in a str, always unpaired: JSON's "\\ud800")
_NOT_TEXT = re.compile("[\x00\ud800-\udfff]")


class BadInput(ValueError):
    """A call's arguments are malformed or over the limits; nothing was stored or deleted."""


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
        self, messages: Sequence[Mapping[str, Any]], now: str, first: int = 0
    ) -> list[NewMessage]:
        """The batch as NewMessages (`time` defaults to `now`). `first`: the position of messages[0] in what
        the caller sends (an import's batches), so that an error names the message's own position."""
        if isinstance(messages, (str, bytes, Mapping)) or not isinstance(messages, Sequence) or not messages:
            raise BadInput("messages must be a non-empty list")
        if len(messages) > self.max_messages_per_add:
            raise BadInput(f"at most {self.max_messages_per_add} messages per add, got {len(messages)}")
        batch = []
        for n, m in enumerate(messages, first):
            if not isinstance(m, Mapping):
                raise BadInput(f"message {n}: must be an object with role and text")
            fields = {"role": m.get("role"), "text": m.get("text")}
            fields["time"] = m.get("time") or now
            fields["session_id"] = m.get("session_id") or DEFAULT_SESSION
            for key, value in fields.items():
                check_text(
                    f"message {n}: {key}", value, self.max_text_chars if key == "text" else self.max_id_chars
                )
            source = m.get("source")
            if source is not None:
                check_text(f"message {n}: source", source, self.max_id_chars)
            batch.append(NewMessage(**fields, source=source))
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
