"""What every method shares: the MemoryBlock it returns and the per-job Context it reads from."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from lazymem.data.schema import History, Question
from lazymem.retrieval.base import SearchResult

STYLES = ("compressed", "raw")  # which answer prompt reads the block: notes or verbatim messages


@dataclass
class MemoryBlock:
    """A memory block plus what it took to build it; every field but `detail` is a typed record field.

    `style` picks the answer prompt (one of STYLES). `shown` are the message indices whose content reached
    the block (evidence coverage). `timings` holds seconds for the stages the method ran (`retrieval`,
    `processing`). `retrieved`/`scores` are the retrieval ranking it started from, `windows` the memory
    model's per-window records (construct.processor.WindowResult.to_record) and `decided` the messages
    that got a KEEP/DROP decision, `compressed` the text each shown message has in the block where a
    memory model rewrote it (message index -> KEEP content); methods without those stages leave them
    empty. `detail` holds method-specific extras that go into the record under `detail` and that no
    metric reads.
    """

    text: str
    style: str
    shown: list[int]
    timings: dict[str, float] = field(default_factory=dict)
    retrieved: list[int] = field(default_factory=list)
    scores: list[float] = field(default_factory=list)
    windows: list[dict[str, Any]] = field(default_factory=list)
    decided: list[int] = field(default_factory=list)
    compressed: dict[int, str] = field(default_factory=dict)
    detail: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.style not in STYLES:
            raise ValueError(f"memory style {self.style!r} not in {STYLES}")


class NotApplicable(Exception):
    """The method is not defined for this benchmark; the question is recorded, not scored or failed."""


@runtime_checkable
class Method(Protocol):
    """What the evaluate task needs from a method (conf/method/NAME.yaml instantiates one).

    `roles` are the LLM roles (llm.roles.NAME) the method calls itself; the answer and judge roles belong
    to the job. `needs_retrieval` says whether the job must build its retriever for this method.
    """

    name: str
    roles: tuple[str, ...]
    needs_retrieval: bool

    async def build(self, question: Question, history: History, ctx: Context) -> MemoryBlock: ...


class Context:
    """Shared by every method of a job: the retriever (indexes and searches reused) and the LLM roles.

    Retrieval for a question runs once per job; later methods reuse the result and are charged the
    latency it cost the first time (so each method's timings stay comparable).
    """

    def __init__(self, retriever=None, llms=None, dataset_name: str | None = None):
        self.retriever, self.llms = retriever, llms
        self.dataset_name = dataset_name  # lets a method decline a benchmark it is not defined for
        self._searches: dict[tuple[str, str], tuple[SearchResult, float, int]] = {}

    def new_pass(self) -> None:
        """Forget the retrieval results of earlier passes (latency protocol: every pass searches anew).
        The per-history indexes stay: they are the stored memory, built before any question is timed."""
        self._searches.clear()

    def dense(self, name: str = "dense"):
        """The job's dense retriever `retrieval.retrievers.NAME` (its encoder and embedding cache)."""
        if self.retriever is None:
            raise RuntimeError(f"this method needs the dense retriever {name!r} but the job has no retriever")
        return self.retriever.dense(name)

    def search(self, question: Question, history: History, n: int) -> tuple[SearchResult, float]:
        """The top-n retrieved messages and the seconds that retrieval took (index build excluded)."""
        if self.retriever is None:
            raise RuntimeError("this method needs retrieval but the job has no retriever configured")
        key = (question.id, history.id)
        hit = self._searches.get(key)
        # a search asked at least this deep serves it, even when it found fewer (BM25 alone may)
        if hit is None or hit[2] < n:
            self.retriever.index(history)  # build outside the timed search, like a stored index
            t0 = time.perf_counter()
            depth = max(n, self.retriever.n)
            result = self.retriever.search(history, question.text, depth)
            hit = (result, time.perf_counter() - t0, depth)
            self._searches[key] = hit
        result, seconds, _ = hit
        head = SearchResult(result.indices[:n], result.scores[:n], result.timings, result.ranked)
        return head, seconds
