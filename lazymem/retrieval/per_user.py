"""The port between a retriever and the agent memory: what a retriever offers to serve one user of it.

A research retriever needs only `lazymem.retrieval.base.Retriever`'s three hooks (build, problems, gpu_keys).
The agent memory serves many users from one process, each history growing message by message and shrinking
when a user forgets, so it asks more of a retriever: a form of its own per user whose derived data (vectors,
an index on disk) lives in that user's storage, an index grown instead of rebuilt after an add, work done
ahead of the first query, and the names of the vectors a deletion must drop. A retriever that offers this
implements `PerUserRetriever`; the agent checks each entry of `retrieval.retrievers` for it.

The storage types describe what the agent hands a retriever's per-user form; the agent (lazymem/agent/)
implements them, and nothing here imports it.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from pathlib import Path
from typing import Protocol, runtime_checkable

import numpy as np

from lazymem.data.schema import Message
from lazymem.retrieval.base import Index


class EmbeddingCacheLike(Protocol):
    """Vectors by (model identity, text key), as `lazymem.retrieval.embed_cache.EmbeddingCache` keeps them."""

    def get(self, model: str, keys: Sequence[str]) -> dict[str, np.ndarray]:
        """The vectors of the keys it holds (absent keys are left out)."""
        ...

    def put(self, model: str, items: dict[str, np.ndarray]) -> None: ...

    def close(self) -> None: ...


class Blocks(Protocol):
    """One user's derived data as numbered blobs, grouped by (kind, name): e.g. kind "vectors" with the
    model identity as name. It is bound to the generation the user had when it was opened: once a deletion
    moved the user on, it writes nothing more, so no blob derived from a forgotten message outlives it."""

    def read(self, kind: str, name: str, numbers: Collection[int] | None = None) -> dict[int, bytes]:
        """The blocks of (kind, name) by number: all of them (`numbers` None), or those of `numbers` held."""
        ...

    def write(self, kind: str, name: str, blocks: Mapping[int, bytes | None], replace: bool = False) -> bool:
        """Store `blocks` in one transaction: a None value deletes that block, and `replace` also deletes
        every other block of (kind, name). False, and nothing written, when the user's generation moved on."""
        ...


class UserStorage(Protocol):
    """Where one user's derived data lives. A per-user form keeps what it derives from the user's messages
    here and nowhere else, so that a forget or a retention purge deletes it with the messages: files in
    `dir` (a folder of the user's own, deleted with the user), vectors in `embedding_cache()`, blobs in
    `blocks()`. On a server database `dir` is scratch space local to one replica, and the cache and the
    blocks are rows of the database."""

    @property
    def dir(self) -> Path: ...

    def embedding_cache(self) -> EmbeddingCacheLike:
        """The user's vectors; the caller closes it."""
        ...

    def blocks(self) -> Blocks:
        """The user's blocks of derived data."""
        ...


@runtime_checkable
class PerUserRetriever(Protocol):
    """The hooks the agent memory asks of a retriever (besides `Retriever`'s), to serve each user
    incrementally. An entry of `retrieval.retrievers` without them is served by the agent all the same, but
    rebuilt from scratch whenever the user's messages change, and it may keep nothing per user."""

    def for_user(self, storage: UserStorage) -> PerUserRetriever:
        """The form of this retriever that serves one user: the same models (one copy in memory), and
        whatever it derives from the user's messages kept in `storage`."""
        ...

    def extend(self, index: Index, messages: Sequence[Message]) -> Index | None:
        """The index of the messages `index` was built on followed by `messages` (their `idx` continue the
        list), made from `index` instead of from scratch; None when it cannot, and the caller builds anew.
        The agent's first query after an add takes this path."""
        ...

    def warm(self, messages: Sequence[Message]) -> int:
        """Derive and store now what a later build over these messages will need (e.g. vectors in the
        user's cache) without building an index; how many texts that took. The agent calls it soon after
        messages are added, so that the user's next query does not pay for them."""
        ...

    def vector_keys(self, messages: Sequence[Message]) -> dict[str, set[str]] | None:
        """The keys, by model identity, under which the per-user form stores vectors of these messages in
        the user's embedding cache. When some of a user's messages are deleted, the agent drops exactly
        these and keeps the user's other vectors of the models named; everything else derived goes. {}: it
        stores no vectors. None: the keys cannot be told from the messages (every vector goes)."""
        ...

    def vector_width(self, model: str) -> int | None:
        """How many values its vectors under the model identity `model` have; None when it stores none
        under that identity. An import that carries vectors is checked against it."""
        ...

    def close(self) -> None:
        """Release what `for_user` opened (files, connections)."""
        ...
