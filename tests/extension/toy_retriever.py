"""Toy first-stage retrievers defined outside lazymem: both rank the most recent messages first. The first has
only the research hooks (build, problems, gpu_keys); the second also offers the agent memory's per-user port
(lazymem.retrieval.per_user.PerUserRetriever) and keeps derived data per user."""

from __future__ import annotations

from collections.abc import Sequence

from lazymem.data.schema import Message
from lazymem.retrieval.base import Ranking, Retriever
from lazymem.retrieval.per_user import PerUserRetriever, UserStorage


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


class SeenRetriever(Retriever, PerUserRetriever):
    """A retriever with a cache of its own: per user of the agent memory it writes the texts it indexed to
    `seen.txt` in that user's storage (standing in for any derived data: vectors, an index on disk), and
    appends the new texts after an add instead of writing them all again."""

    def __init__(self, storage: UserStorage | None = None):
        self.storage = storage

    def for_user(self, storage: UserStorage) -> SeenRetriever:
        return SeenRetriever(storage)

    def build(self, messages: Sequence[Message]) -> SeenIndex:
        self._write("w", [m.text for m in messages])
        return SeenIndex(len(messages))

    def extend(self, index: SeenIndex, messages: Sequence[Message]) -> SeenIndex:
        self._write("a", ["", *(m.text for m in messages)])
        return SeenIndex(index.size + len(messages))

    def warm(self, messages: Sequence[Message]) -> int:
        return 0  # nothing worth deriving ahead of a query

    def vector_keys(self, messages: Sequence[Message]) -> dict[str, set[str]]:
        return {}  # it stores no vectors: a deletion drops all it derived

    def vector_width(self, model: str) -> None:
        return None

    def close(self) -> None:
        pass

    def _write(self, mode: str, texts: list[str]) -> None:
        if self.storage is not None:
            self.storage.dir.mkdir(parents=True, exist_ok=True)
            with open(self.storage.dir / "seen.txt", mode) as f:
                f.write("\n".join(texts))
