"""The agent memory's retrieval per user: the shared research retrieval, composed for each user.

`UserRetrieval` wraps the `HybridRetriever` that `cfg.retrieval` instantiates (shared models, shared fusion
and reranker) and checks each of its entries for the per-user port (`lazymem.retrieval.per_user`'s
`PerUserRetriever`). An entry with the port gets a form of its own per user, keeping its derived data in the
user's storage, and its index grows after an add instead of being rebuilt. An entry with only the research
hooks (build, problems, gpu_keys) is served as it is: the agent keeps nothing of it per user, and rebuilds its
index from scratch whenever the user's messages changed. It is served rather than refused, so that a retriever
written for the experiments also works as an agent's memory, only slower on long histories.

`LocalUserStorage` is the user's storage as a folder of their own (the SQLite store, and the scratch folder
of a server database's replica).
"""

from __future__ import annotations

import logging
import operator
import shutil
import time
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from lazymem.agent import vector_blocks
from lazymem.agent.local_blocks import LocalBlocks
from lazymem.agent.vector_blocks import BlockEmbeddingCache
from lazymem.data.schema import History, Message
from lazymem.retrieval.base import Index, Retriever
from lazymem.retrieval.dense import DenseRetriever
from lazymem.retrieval.hybrid import HistoryIndex, HybridRetriever
from lazymem.retrieval.per_user import PerUserRetriever, UserStorage

log = logging.getLogger(__name__)


# The user's blocks (vector blocks, BM25 state) in their folder
BLOCKS_FILE = "blocks.sqlite"


@dataclass(frozen=True)
class LocalUserStorage:
    """A user's derived data in `dir`, a folder of the user's own that a forget or a retention purge
    deletes: the blocks (`blocks.sqlite`: the vectors, kind "vectors", and e.g. BM25 state) and any file a
    retriever's per-user form writes there."""

    dir: Path

    def embedding_cache(self) -> BlockEmbeddingCache:
        """The user's vectors, in their "vectors" blocks."""
        return BlockEmbeddingCache(self.blocks())

    def blocks(self) -> LocalBlocks:
        return LocalBlocks(self.dir / BLOCKS_FILE)

    def keep_vectors(self, dropped: Mapping[str, Collection[str]]) -> None:
        """After some of the user's messages were deleted (nothing of the user is open): delete every file
        in `dir` but the blocks file, every block but the vectors, and of the vectors those of the models
        not in `dropped` and the keys it names (the deleted messages' `vector_keys`)."""
        cache = self.embedding_cache()
        try:
            cache.keep_only(dropped)
        finally:
            cache.close()
        self.blocks().keep_kinds({vector_blocks.KIND})
        kept = {BLOCKS_FILE, f"{BLOCKS_FILE}-wal", f"{BLOCKS_FILE}-shm"}
        for entry in self.dir.iterdir():
            if entry.name in kept:
                continue
            if entry.is_dir():
                shutil.rmtree(entry)
            else:
                entry.unlink()


def _merged(ports: Iterable[PerUserRetriever], messages: Sequence[Message]) -> dict[str, set[str]] | None:
    """The ports' `vector_keys` of `messages`, merged by model (None if any one cannot name its keys)."""
    merged: dict[str, set[str]] = {}
    for port in ports:
        keys = port.vector_keys(messages)
        if keys is None:
            return None
        for model, found in keys.items():
            merged.setdefault(model, set()).update(found)
    return merged


def _extends(old: Sequence[Message], new: Sequence[Message]) -> bool:
    """Whether `new` is `old` (the very same message objects, in order) followed by more messages: what the
    agent's next query after an add passes, and nothing else (equal texts in new objects prove nothing)."""
    return len(new) > len(old) and all(map(operator.is_, old, new))


def _same(old: Sequence[Message], new: Sequence[Message]) -> bool:
    """Whether `new` holds the very message objects of `old`, in order."""
    return len(new) == len(old) and all(map(operator.is_, old, new))


class Growing(Retriever):
    """A per-user form that remembers the index it built last, and grows it with `extend` when the next
    history is that one followed by more messages; otherwise it builds from scratch."""

    def __init__(self, form: Retriever):
        self.form = form
        self._last: tuple[Sequence[Message], Index] | None = None

    def build(self, messages: Sequence[Message]) -> Index:
        grown = None
        if self._last is not None and _extends(self._last[0], messages):
            old, index = self._last
            grown = self.form.extend(index, messages[len(old) :])
        built = grown if grown is not None else self.form.build(messages)
        self._last = (messages, built)
        return built

    def problems(self, where: str) -> list[str]:
        return self.form.problems(where)

    def gpu_keys(self, where: str) -> list[str]:
        return self.form.gpu_keys(where)


class UserHybrid(HybridRetriever):
    """The hybrid retrieval of one user; `dense()` answers with the user's own dense retriever, so a method
    that embeds its own units (NanoMemory's turns) uses the user's cache.

    `index` knows a history by its message objects, not by a content hash: the agent passes the messages it
    holds for the user (new objects whenever they were read anew), and hashing 100,000 messages took
    0.1-0.3 s of every query."""

    _last: HistoryIndex | None = None

    def index(self, history: History) -> HistoryIndex:
        last = self._last
        if last is not None and _same(last.messages, history.messages):
            return last
        indexes, timings = {}, {}
        for name, retriever in self.retrievers.items():  # a Growing entry extends its last index if it can
            t0 = time.perf_counter()
            indexes[name] = retriever.build(history.messages)
            timings[name] = time.perf_counter() - t0
        self._last = HistoryIndex(history, indexes, timings, self)
        self.builds += 1
        return self._last

    def clear(self) -> None:
        self._last = None

    def dense(self, name: str = "dense") -> DenseRetriever:
        entry = self.retrievers.get(name)
        if isinstance(entry, Growing) and isinstance(entry.form, DenseRetriever):
            return entry.form
        return super().dense(name)


class UserRetriever:
    """What one process holds open for one user's retrieval: `hybrid` (what methods get as
    `Context.retriever`) over the per-user forms, which `warm` and `close` reach, and the user's `storage`
    they were made for."""

    def __init__(
        self,
        hybrid: HybridRetriever,
        forms: Mapping[str, PerUserRetriever],
        storage: UserStorage | None = None,
    ):
        self.hybrid = hybrid
        self.forms = dict(forms)
        self.storage = storage

    def warm(self, messages: Sequence[Message]) -> int:
        """Each per-user form's `warm` (the dense retriever embeds into the user's cache); texts derived."""
        return sum(form.warm(messages) for form in self.forms.values())

    def vector_keys(self, messages: Sequence[Message]) -> dict[str, set[str]] | None:
        """The forms' keys of these messages' vectors, merged by model (None if any one cannot name them)."""
        return _merged(self.forms.values(), messages)

    def retire_other_vectors(self, messages: Sequence[Message]) -> list[str] | None:
        """After an encoder change: delete the user's vector blocks of every model none of the forms
        stores, once the forms' own vectors cover every one of `messages` (the user's whole history), so
        that nothing the user may query is left without vectors. The models deleted ([] when there were
        none); None when nothing was deleted because the forms' vectors do not cover the messages yet,
        their keys cannot be named (a template with `{idx}`), or the user's generation moved on (a deletion
        got there first, and its own rewrite dropped them)."""
        models = self.vector_keys([])
        if models is None or self.storage is None:
            return None
        cache, own = self._vector_cache()
        try:
            others = [name for name in cache.models() if name not in models]
            if not others:  # what every claim costs when there is nothing to do: one look at the names
                return []
            current = self.vector_keys(messages)
            if current is None or any(cache.missing(model, keys) for model, keys in current.items()):
                return None
            return others if cache.drop_models(others) else None
        finally:
            if not own:
                cache.close()

    def _vector_cache(self) -> tuple[BlockEmbeddingCache, bool]:
        """A form's own block cache (it knows where its keys are: no block is read again), else one opened
        on the storage; and whether it is a form's (not to be closed here)."""
        for form in self.forms.values():
            cache = getattr(form, "cache", None)
            if isinstance(cache, BlockEmbeddingCache):
                return cache, True
        return self.storage.embedding_cache(), False

    def close(self) -> None:
        for form in self.forms.values():
            form.close()


class UserRetrieval:
    """The shared retrieval, composed per user; logs one warning per entry without the per-user port."""

    def __init__(self, shared: HybridRetriever):
        self.shared = shared
        self.ports: dict[str, PerUserRetriever] = {}
        for name, retriever in shared.retrievers.items():
            if isinstance(retriever, PerUserRetriever):
                self.ports[name] = retriever
            else:
                log.warning(
                    "retrieval.retrievers.%s has only the research hooks (build, problems, gpu_keys): "
                    "served without incremental updates",
                    name,
                )

    def for_user(self, storage: UserStorage) -> UserRetriever:
        """The user's retrieval: the port entries' per-user forms (their derived data in `storage`), the
        others shared as they are; the shared fusion and reranker, and an index cache of the user's own."""
        forms = {name: port.for_user(storage) for name, port in self.ports.items()}
        entries = {
            name: Growing(forms[name]) if name in forms else retriever
            for name, retriever in self.shared.retrievers.items()
        }
        shared = self.shared
        hybrid = UserHybrid(
            entries, shared.fusion, shared.reranker, shared.n, shared.rerank_candidates, 1, shared.parallel
        )
        return UserRetriever(hybrid, forms, storage)

    def vector_keys(self, messages: Sequence[Message]) -> dict[str, set[str]] | None:
        """The port entries' keys of these messages' vectors, merged by model (None if any one cannot name
        its keys); an entry without the port stores no vectors."""
        return _merged(self.ports.values(), messages)

    def vector_models(self) -> set[str] | None:
        """The model identities the port entries store vectors under (what a user's vector blocks are named
        by); None when one cannot name its keys (then no other model's vectors can be told apart)."""
        keys = self.vector_keys([])
        return None if keys is None else set(keys)

    def vector_width(self, model: str) -> int | None:
        """The width the first port entry that stores vectors of `model` gives them."""
        for port in self.ports.values():
            width = port.vector_width(model)
            if width is not None:
                return width
        return None
