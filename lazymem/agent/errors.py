"""The agent memory's errors: one class per kind, each with a machine-readable `code` and the HTTP status it
answers with. The same code reaches a client on every interface: the Python exception's `.code`, the
`code` field of an HTTP error body, and the `[code]` that opens an MCP tool error (docs/agent-contract.md).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import ClassVar


class AgentError(Exception):
    """Base of the errors a caller of the agent memory can act on."""

    code: ClassVar[str] = "error"
    status: ClassVar[int] = 500

    def __str__(self) -> str:  # KeyError's own str() would quote the message
        return str(self.args[0]) if self.args else self.code


class BadInput(AgentError, ValueError):
    """A call's arguments are malformed or over the limits; nothing was stored or deleted."""

    code, status = "bad_input", 400


class UnknownUser(AgentError, KeyError):
    """The user has no stored messages (never added, or everything forgotten)."""

    code, status = "unknown_user", 404

    def __init__(self, user_id: str):
        super().__init__(user_id)
        self.user_id = user_id

    def __str__(self) -> str:
        return f"unknown user {self.user_id!r}: no stored messages"


class UnknownMessages(AgentError, KeyError):
    """Some message ids to forget are not this user's; nothing was deleted. The message gives how many and
    a few of them, never the whole list (a client may send tens of thousands)."""

    code, status = "unknown_messages", 404
    EXAMPLES: ClassVar[int] = 5

    def __init__(self, ids: Sequence[int]):
        self.ids = sorted(ids)
        super().__init__(self.ids)

    def __str__(self) -> str:
        shown = ", ".join(map(str, self.ids[: self.EXAMPLES]))
        more = f" and {len(self.ids) - self.EXAMPLES} more" if len(self.ids) > self.EXAMPLES else ""
        noun = "id is" if len(self.ids) == 1 else "ids are"
        return f"{len(self.ids)} message {noun} not stored for this user ({shown}{more}); nothing was deleted"


class IdempotencyConflict(AgentError):
    """An add reused an idempotency key with another body; nothing was stored."""

    code, status = "idempotency_conflict", 409


class TooLarge(AgentError):
    """A request over a configured size bound."""

    code, status = "too_large", 413


class StoreUnavailable(AgentError):
    """The store could not be reached within the configured wait. The call most likely changed nothing,
    but a connection lost during its commit leaves that open: a retry is safe for an add with an
    idempotency key (and for a forget), which is why every add should carry one.

    `outage`: the store is down or does not answer (a lost connection, no answer in time, no connection
    to be had), as opposed to busy (a lock or statement timeout: it answered, in time, that it could not
    serve). An outage makes the next calls fail fast until the store is found up again."""

    code, status = "store_unavailable", 503

    def __init__(self, reason: str, retry_after_s: float = 1.0, outage: bool = True):
        super().__init__(reason)
        self.retry_after_s, self.outage = retry_after_s, outage

    def retry_after_header(self) -> str:
        """The `Retry-After` header's value: whole seconds, at least 1."""
        return str(max(1, math.ceil(self.retry_after_s)))


class MaintenanceFailed(RuntimeError):
    """A store's maintenance step could not make past deletions final (they stay marked for the next step).
    Its message is the store's own words, what to grant or change, never a row's: it may be logged."""


class ModelFailed(AgentError):
    """The memory model (an LLM role) failed after its retries."""

    code, status = "model_failed", 502


class Unauthorized(AgentError):
    """A missing or unknown API key (HTTP only)."""

    code, status = "unauthorized", 401


# Every kind, for the docs page and the OpenAPI schema's list of codes
KINDS: tuple[type[AgentError], ...] = (
    BadInput,
    UnknownUser,
    UnknownMessages,
    IdempotencyConflict,
    TooLarge,
    StoreUnavailable,
    ModelFailed,
    Unauthorized,
)
