"""What one process holds open for one user of the agent memory, and how a stored message becomes
retrieval's record."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from lazymem.agent.store import NewMessage, StoredMessage
from lazymem.agent.user_retrieval import UserRetriever
from lazymem.data.schema import Message


class UserState:
    """A user's retrieval (`UserRetriever`: its own derived data, and the hybrid retrieval methods query)
    and LLM roles (their own response cache), built at one generation of the user's messages, with the
    messages as last read."""

    def __init__(self, generation: int, retriever: UserRetriever | None, llms: Any):
        self.generation, self.retriever, self.llms = generation, retriever, llms
        # The user's messages as last read (a query reads only what was added since), and the same as
        # retrieval's records, position by position; `warmed`: how many of them are known to be embedded.
        self.stored: list[StoredMessage] = []
        self.history: list[Message] = []
        self.warmed = 0

    @property
    def messages(self) -> int:
        """How many messages it holds, with their indexes: what its memory grows with."""
        return len(self.stored)

    @property
    def last_id(self) -> int:
        return self.stored[-1].id if self.stored else 0

    def extend(self, new: Sequence[StoredMessage]) -> None:
        start = len(self.stored)
        self.stored.extend(new)
        self.history.extend(as_message(i, m) for i, m in enumerate(new, start))

    def close(self) -> None:
        if self.retriever is not None:
            self.retriever.close()
        if self.llms is not None:
            self.llms.close()


def as_message(idx: int, m: StoredMessage | NewMessage) -> Message:
    """A stored message as retrieval's record at position `idx`: what is indexed, what a deletion names
    the vectors of, and what an import's carried vectors are checked against are made the same way."""
    return Message(idx, m.session_id, m.time, m.role, m.text)
