"""Types shared by the retrievers: their research contract (Retriever, Index, Reranker), a ranked list, a
search result, and message rendering.

Every retriever ranks messages by their `Message.idx`; the text it sees is rendered from a template so
that what BM25, the bi-encoder and the reranker read can be tuned separately (e.g. `"{role}: {text}"`).
"""

from __future__ import annotations

import string
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Protocol

import numpy as np

from lazymem.data.schema import Message

# Fields a message template may use.
TEMPLATE_FIELDS = ("idx", "session_id", "time", "role", "text")


@dataclass(frozen=True)
class Ranking:
    """Message indices, best first, with the score that ordered them."""

    indices: tuple[int, ...]
    scores: tuple[float, ...]

    def __len__(self) -> int:
        return len(self.indices)

    def head(self, depth: int | None) -> Ranking:
        if depth is None:
            return self
        return Ranking(self.indices[:depth], self.scores[:depth])


@dataclass
class SearchResult:
    """The top-n messages for one query.

    `scores` come from the last stage that ordered the list: the reranker if one ran, else the fused
    RRF score, else the single retriever's own score. `timings` holds seconds per stage of this retrieval
    (each retriever by name, fusion, rerank, and the total); a stage that did not run reads 0.0.
    `ranked` keeps each retriever's list as it entered fusion (for recall studies).
    """

    indices: list[int]
    scores: list[float]
    timings: dict[str, float]
    ranked: dict[str, tuple[int, ...]] = field(default_factory=dict)


class Index(Protocol):
    """One retriever's index over one history. `embedded`: texts it had to encode (0 for lexical ones)."""

    embedded: int

    def search(self, query: str, k: int | None = None) -> Ranking:
        """Positions in the message list the index was built on, best first (top k; None = all)."""
        ...


class Retriever:
    """A first-stage retriever (an entry of `retrieval.retrievers`): indexes one history's messages.

    Subclasses implement :meth:`build`; :meth:`problems` and :meth:`gpu_keys` default to nothing to report.
    HybridRetriever and preflight ask these hooks instead of checking which retriever it is. What the agent
    memory needs besides (a form per user, an index grown after an add) is a separate protocol,
    `lazymem.retrieval.per_user.PerUserRetriever`: a retriever with only these three hooks runs in every
    task, and the agent memory serves it without incremental updates.
    """

    def build(self, messages: Sequence[Message]) -> Index:
        raise NotImplementedError(f"{type(self).__name__} does not say how it indexes messages")

    def problems(self, where: str) -> list[str]:
        """What is missing before it can run (`where`: its config key), each with its fix; [] if nothing."""
        return []

    def gpu_keys(self, where: str) -> list[str]:
        """The config keys of its parts that will run on a GPU (preflight needs one for them)."""
        return []


class Reranker:
    """Scores candidates for a query, higher is better; None = no reranking (keep the fused order).
    Rerankers are shared by every user (they derive nothing from a user's messages)."""

    def score(self, query: str, messages: Sequence[Message]) -> list[float] | None:
        raise NotImplementedError(f"{type(self).__name__} does not say how it scores")

    def problems(self, where: str) -> list[str]:
        """What is missing before it can run (`where`: its config key); [] if nothing."""
        return []

    def gpu_keys(self, where: str) -> list[str]:
        """The config keys of its parts that will run on a GPU."""
        return []


def check_template(template: str) -> str:
    """Fail at config time, not mid-run, on a template naming an unknown field."""
    unknown = template_fields(template) - set(TEMPLATE_FIELDS)
    if unknown:
        raise ValueError(
            f"template {template!r} uses unknown field(s) {sorted(unknown)}; allowed: {list(TEMPLATE_FIELDS)}"
        )
    return template


def template_fields(template: str) -> set[str]:
    """The message fields a template uses."""
    return {name for _, name, _, _ in string.Formatter().parse(template) if name is not None}


def render(message: Message, template: str) -> str:
    return template.format(
        idx=message.idx,
        session_id=message.session_id,
        time=message.time,
        role=message.role,
        text=message.text,
    )


def top_k(scores: np.ndarray, k: int | None, positive_only: bool = False) -> Ranking:
    """Indices of the k highest scores; ties go to the earlier message so results are reproducible."""
    order = np.argsort(-scores, kind="stable")
    if positive_only:
        order = order[scores[order] > 0]
    if k is not None:
        order = order[:k]
    return Ranking(tuple(int(i) for i in order), tuple(float(scores[i]) for i in order))
