"""What every method shares: the Memory it returns and the per-job Context it reads from."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Protocol

from lazymem.data.schema import History, Question
from lazymem.retrieval.base import SearchResult

STYLES = ("compressed", "raw")


@dataclass
class Memory:
    """A memory block plus what it took to build it.

    `style` picks the answer prompt (compressed notes vs verbatim messages). `shown` are the message
    indices whose content reached the block (for evidence coverage). `timings` holds seconds for the
    stages the method ran (`retrieval`, `processing`); `detail` goes into the record as is.
    """

    text: str
    style: str
    shown: list[int]
    timings: dict[str, float] = field(default_factory=dict)
    detail: dict[str, Any] = field(default_factory=dict)


class NotApplicable(Exception):
    """The method is not defined for this benchmark; the question is recorded, not scored or failed."""


class Method(Protocol):
    name: str

    async def build(self, question: Question, history: History, ctx: Context) -> Memory: ...


class Context:
    """Shared by every method of a job: the retriever (indexes and searches reused), LLM roles, options.

    Retrieval for a question runs once per job; later methods reuse the result and are charged the
    latency it cost the first time (so each method's timings stay comparable).
    """

    def __init__(self, retriever=None, llms=None, processor=None, dataset_name: str | None = None):
        self.retriever, self.llms, self.processor = retriever, llms, processor
        self.dataset_name = dataset_name  # lets a method decline a benchmark it is not defined for
        self._searches: dict[tuple[str, str], tuple[SearchResult, float]] = {}

    def new_pass(self) -> None:
        """Forget the retrieval results of earlier passes (latency protocol: every pass searches anew).
        The per-history indexes stay: they are the stored memory, built before any question is timed."""
        self._searches.clear()

    def search(self, question: Question, history: History, n: int) -> tuple[SearchResult, float]:
        """The top-n retrieved messages and the seconds that retrieval took (index build excluded)."""
        if self.retriever is None:
            raise RuntimeError("this method needs retrieval but the job has no retriever configured")
        key = (question.id, history.id)
        hit = self._searches.get(key)
        if hit is None or len(hit[0].indices) < min(n, len(history.messages)):
            self.retriever.index(history)  # build outside the timed search, like a stored index
            t0 = time.perf_counter()
            result = self.retriever.search(history, question.text, max(n, self.retriever.n))
            hit = (result, time.perf_counter() - t0)
            self._searches[key] = hit
        result, seconds = hit
        head = SearchResult(result.indices[:n], result.scores[:n], result.timings, result.ranked)
        return head, seconds


def query_time(question: Question, history: History) -> str:
    """When the question is asked: the benchmark's date, else the time of the last message (LoCoMo)."""
    if question.date:
        return question.date
    return history.messages[-1].time if history.messages else "unknown"
