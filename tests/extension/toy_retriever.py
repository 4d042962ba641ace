"""Toy first-stage retrievers defined outside lazymem: both rank the most recent messages first; the second
keeps derived data per user of the agent memory."""

from __future__ import annotations

from collections.abc import Sequence

from lazymem.data.schema import Message
from lazymem.retrieval.base import Ranking, Retriever, UserStorage


class RecencyIndex:
    embedded = 0  # nothing encoded

    def __init__(self, size: int):
        self.size = size

    def search(self, query: str, k: int | None = None) -> Ranking:
        order = tuple(range(self.size - 1, -1, -1))[:k]
        return Ranking(order, tuple(float(-rank) for rank in range(len(order))))


class RecencyRetriever(Retriever):
    def build(self, messages: Sequence[Message]) -> RecencyIndex:
        return RecencyIndex(len(messages))


class SeenIndex(RecencyIndex):
    pass


class SeenRetriever(Retriever):
    """A retriever with a cache of its own: per user of the agent memory it writes the texts it indexed to
    `seen.txt` in that user's storage (standing in for any derived data: vectors, an index on disk)."""

    def __init__(self, storage: UserStorage | None = None):
        self.storage = storage

    def for_user(self, storage: UserStorage) -> SeenRetriever:
        return SeenRetriever(storage)

    def build(self, messages: Sequence[Message]) -> SeenIndex:
        if self.storage is not None:
            self.storage.dir.mkdir(parents=True, exist_ok=True)
            (self.storage.dir / "seen.txt").write_text("\n".join(m.text for m in messages))
        return SeenIndex(len(messages))
