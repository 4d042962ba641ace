"""A toy first-stage retriever defined outside lazymem: ranks the most recent messages first."""

from __future__ import annotations

from collections.abc import Sequence

from lazymem.data.schema import Message
from lazymem.retrieval.base import Ranking


class RecencyIndex:
    embedded = 0  # nothing encoded

    def __init__(self, size: int):
        self.size = size

    def search(self, query: str, k: int | None = None) -> Ranking:
        order = tuple(range(self.size - 1, -1, -1))[:k]
        return Ranking(order, tuple(float(-rank) for rank in range(len(order))))


class RecencyRetriever:
    def build(self, messages: Sequence[Message]) -> RecencyIndex:
        return RecencyIndex(len(messages))
