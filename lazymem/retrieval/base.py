"""Types shared by the retrievers: a ranked list, a search result, and message rendering.

Every retriever ranks messages by their `Message.idx`; the text it sees is rendered from a template so
that what BM25, the bi-encoder and the reranker read can be tuned separately (e.g. `"{role}: {text}"`).
"""

from __future__ import annotations

import shutil
import string
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

import numpy as np

from lazymem.data.schema import Message
from lazymem.retrieval.embed_cache import EmbeddingCache

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


@dataclass(frozen=True)
class UserStorage:
    """Where one user's derived data lives (lazymem.agent gives every user one). A retriever that derives
    data from a user's messages keeps it here and nowhere else: files in `dir`, a folder of the user's own
    that a forget or a retention purge deletes, and vectors in :meth:`embedding_cache`. A deletion that
    leaves the user messages keeps their vectors (:meth:`keep_vectors`); every other file goes.

    With a server database (agent.store.kind=postgres) the agent passes a subclass whose embedding cache
    is rows of that database, shared by every replica and deleted in the forget's own transaction; `dir`
    is then a scratch folder local to the replica, deleted as well.
    """

    dir: Path

    def embedding_cache(self) -> EmbeddingCache:
        """The user's vectors by (model identity, text key): `get`, `put`, `close` as EmbeddingCache."""
        return EmbeddingCache(self.dir)

    def keep_vectors(self, dropped: Mapping[str, Collection[str]]) -> None:
        """After some of the user's messages were deleted (nothing of the user is open): delete every file
        in `dir` but the embedding cache, and from the cache the vectors of the models not in `dropped`
        and the keys it names (`Retriever.vector_keys` of the deleted messages)."""
        cache = self.embedding_cache()
        try:
            cache.keep_only(dropped)
        finally:
            cache.close()
        kept = {cache.path.name, f"{cache.path.name}-wal", f"{cache.path.name}-shm"}
        for entry in self.dir.iterdir():
            if entry.name in kept:
                continue
            if entry.is_dir():
                shutil.rmtree(entry)
            else:
                entry.unlink()


class Retriever:
    """A first-stage retriever (an entry of `retrieval.retrievers`): indexes one history's messages.

    Subclasses implement :meth:`build`; the other hooks have defaults for a retriever that keeps nothing
    between histories. HybridRetriever, the agent memory and preflight ask these hooks instead of
    checking which retriever it is.
    """

    def build(self, messages: Sequence[Message]) -> Index:
        raise NotImplementedError(f"{type(self).__name__} does not say how it indexes messages")

    def for_user(self, storage: UserStorage) -> Retriever:
        """The form of this retriever that serves one user of the agent memory: whatever it derives from
        that user's messages goes to `storage`. The default shares this object (nothing is derived)."""
        return self

    def extend(self, index: Index, messages: Sequence[Message]) -> Index | None:
        """The index of the messages `index` was built on followed by `messages` (their `idx` continue
        the list), built from `index` instead of from scratch; None when this retriever cannot (the
        default), and the caller builds anew. The agent memory's query after an add takes this path."""
        return None

    def close(self) -> None:
        """Release what :meth:`for_user` opened (files, connections)."""

    def warm(self, messages: Sequence[Message]) -> int:
        """Derive and store now what a later :meth:`build` over these messages will need (vectors in the
        per-user cache), without building an index; how many texts that took. The agent memory calls it
        soon after messages are added, so a user's first query does not pay for them. Default: nothing."""
        return 0

    def vector_keys(self, messages: Sequence[Message]) -> dict[str, set[str]] | None:
        """The keys, by model identity, under which the per-user form stores vectors of these messages in
        the user's embedding cache. When some of a user's messages are deleted, the agent memory drops
        exactly these and keeps the user's other vectors of the models named; every other derived item
        goes. None: the keys cannot be named (everything goes). Default: {} (it stores no vectors, so
        none is kept)."""
        return {}

    def vector_width(self, model: str) -> int | None:
        """How many values the vectors it stores under the model identity `model` have; None when it stores
        none under that identity (the default). An import that carries vectors checks them against it."""
        return None

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
