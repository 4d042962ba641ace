"""Moving a user's history in and out: an import in batches, each batch one transaction, that stores the
vectors a message carries where this store's retrieval would make the same ones (lazymem/agent/vectors.py),
and an export read page by page, each message with the vectors the user's indexing made for it."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from lazymem.agent.errors import BadInput, UnknownUser
from lazymem.agent.inputs import EXPORT_ONLY_FIELDS, IMPORT_FIELDS, Limits
from lazymem.agent.open_users import OpenUsers
from lazymem.agent.runtime import Runtime, utc_now
from lazymem.agent.store import Added, Derived, NewMessage, Snapshot, Store
from lazymem.agent.user_retrieval import UserRetrieval
from lazymem.agent.user_state import as_message
from lazymem.agent.vectors import Carried, for_export, for_import


@dataclass(frozen=True)
class Imported:
    """What an import did: messages written, messages skipped as already stored (an earlier import of the
    same source), and messages skipped because they were forgotten (a deletion left their key's digest:
    lazymem/agent/store.py)."""

    stored: int = 0
    skipped: int = 0
    forgotten: int = 0

    def __add__(self, other: Imported) -> Imported:
        return Imported(
            self.stored + other.stored, self.skipped + other.skipped, self.forgotten + other.forgotten
        )

    @property
    def total(self) -> int:
        return self.stored + self.skipped + self.forgotten


class ImportStopped(BadInput):
    """A bad message stopped an import; `imported` says what the import had done before it (kept)."""

    def __init__(self, reason: str, imported: Imported):
        super().__init__(f"{reason} ({_stored_before(imported)})")
        self.reason, self.imported = reason, imported


class Moving:
    """Imports and exports of one Memory. `retrieval` is None for a method without retrieval: then no
    vectors travel either way."""

    def __init__(
        self,
        store: Store,
        runtime: Runtime,
        users: OpenUsers,
        limits: Limits,
        retrieval: UserRetrieval | None,
    ):
        self.store, self.runtime, self.users, self.limits = store, runtime, users, limits
        self.retrieval = retrieval

    async def import_(
        self,
        tenant: str,
        user_id: str,
        messages: Iterable[Mapping[str, Any]],
        batch_size: int | None = None,
        progress: Callable[[int], None] | None = None,
        where: Callable[[int], str] | None = None,
    ) -> Imported:
        """`Memory.aimport`, once the caller checked the tenant and user ids."""
        if isinstance(messages, (str, bytes, Mapping)) or not isinstance(messages, Iterable):
            raise BadInput(f"messages must be an iterable of messages, got {type(messages).__name__}")
        most = self.limits.max_messages_per_add
        size = max(1, min(batch_size or most, most))
        where = where or (lambda n: f"message {n + 1}")
        done, chunk = Imported(), []
        for message in messages:
            chunk.append(message)
            if len(chunk) == size:
                done = await self._batch(tenant, user_id, chunk, done, progress, where)
                chunk = []
        if chunk:
            done = await self._batch(tenant, user_id, chunk, done, progress, where)
        return done

    async def _batch(self, tenant, user_id, chunk, done: Imported, progress, where) -> Imported:
        first = done.total
        try:
            batch = self.limits.check_messages(
                chunk, utc_now(), first, IMPORT_FIELDS, where, ignored=EXPORT_ONLY_FIELDS
            )
            kept = {}  # the carried vectors this store would have made: {model: {key: vector}}
            if self.retrieval is not None and any(m.get("vectors") is not None for m in chunk):
                kept = await self.runtime.on_indexer(
                    for_import,
                    self.retrieval,
                    [as_message(0, m) for m in batch],
                    [m.get("vectors") for m in chunk],
                    lambda i: where(first + i),
                )
        except BadInput as e:
            raise ImportStopped(str(e), done) from None
        if not kept:
            added = await self.runtime.on_store(self.store.add, tenant, user_id, batch)
        else:  # under the user's lock: this process's indexer reads the batch only with its vectors
            async with self.users.lock(tenant, user_id):
                added = await self.runtime.on_store(self.store.add, tenant, user_id, batch)
                await self._store_vectors(tenant, user_id, self._without_forgotten(kept, batch, added))
        done += Imported(added.stored, added.skipped, added.forgotten)
        if progress is not None:
            progress(done.total)
        return done

    def _without_forgotten(
        self, kept: dict[str, dict], batch: list[NewMessage], added: Added
    ) -> dict[str, dict]:
        """The carried vectors less those of the messages the store skipped as forgotten: nothing derived
        from a forgotten message is stored again (a vector it shares with a message stored or already
        stored, the same text, stays). None of them when the keys cannot be named."""
        if not added.forgotten:
            return kept
        forgotten = [m for m, i in zip(batch, added.ids, strict=True) if i is None]
        others = [m for m, i in zip(batch, added.ids, strict=True) if i is not None]
        gone = self.retrieval.vector_keys([as_message(n, m) for n, m in enumerate(forgotten)])
        stay = self.retrieval.vector_keys([as_message(n, m) for n, m in enumerate(others)])
        if gone is None or stay is None:
            return {}
        return {
            model: {
                k: v for k, v in vectors.items() if k not in gone.get(model, ()) or k in stay.get(model, ())
            }
            for model, vectors in kept.items()
        }

    async def pages(
        self, tenant: str, user_id: str, vectors: bool = False, page: int | None = 1000
    ) -> AsyncIterator[list[dict[str, Any]]]:
        """`Memory.aexport_pages`: its ids are checked when the first page is wanted."""
        self.limits.check_ids(tenant, user_id)
        after, cache = 0, None
        try:
            while True:
                snapshot = await self.runtime.on_store(self.store.snapshot, tenant, user_id, after, page)
                if not snapshot.messages:
                    if not after:
                        raise UnknownUser(user_id)
                    return
                out = [m.to_dict() for m in snapshot.messages]
                if vectors and self.retrieval is not None:
                    async with self.users.lock(tenant, user_id):  # a forget does not delete them while read
                        if cache is None:
                            cache = await self._open_cache(tenant, user_id, snapshot.generation)
                        found = await self._read_vectors(cache, snapshot)
                    for message, carried in zip(out, found, strict=True):
                        if carried is not None:
                            message["vectors"] = carried
                yield out
                if page is None or len(out) < page:
                    return
                after = snapshot.messages[-1].id
        finally:
            if cache is not None:
                await self.runtime.on_indexer(cache.close)

    async def _open_cache(self, tenant: str, user_id: str, generation: int) -> Any:
        """The user's embedding cache, opened once for all the pages of an export: a cache of vector blocks
        reads them all on its first lookup and later only the blocks a page's keys are in (opened per page,
        an export of 100,000 messages read every block 100 times). None: a local folder not made yet (no
        vectors; asked again on the next page)."""
        if not self.store.derived_in_store and not self.users.folder(tenant, user_id).exists():
            return None
        derived = self.users.derived(tenant, user_id, generation)
        return await self.runtime.on_indexer(derived.storage.embedding_cache)

    async def _read_vectors(self, cache: Any, snapshot: Snapshot) -> list[Carried | None]:
        """Each of the snapshot's messages' vectors in the user's embedding cache (under the user's lock)."""
        if cache is None:
            return [None] * len(snapshot.messages)
        messages = [as_message(i, m) for i, m in enumerate(snapshot.messages)]
        return await self.runtime.on_indexer(for_export, self.retrieval, cache, messages)

    async def _store_vectors(self, tenant: str, user_id: str, vectors: Mapping[str, dict]) -> None:
        """Put imported vectors ({model: {key: vector}}) into the user's embedding cache (under the user's
        lock), at the user's current generation: on a server database the rows refuse a write under an
        older one. The cache is opened afresh for each batch, and only written."""
        known = await self.runtime.on_store(self.store.generations, [(tenant, user_id)])
        if (tenant, user_id) not in known:  # forgotten since the add (by another process)
            return

        def put(cache) -> None:
            for model, items in vectors.items():
                cache.put(model, items)

        await self._on_embedding_cache(self.users.derived(tenant, user_id, known[(tenant, user_id)]), put)

    async def _on_embedding_cache(self, derived: Derived, work: Callable[[Any], Any]) -> Any:
        """`work(cache)` on the user's embedding cache, opened and closed in the indexer thread (where the
        caches' SQLite connections live)."""

        def run() -> Any:
            cache = derived.storage.embedding_cache()
            try:
                return work(cache)
            finally:
                cache.close()

        return await self.runtime.on_indexer(run)


def _stored_before(done: Imported) -> str:
    skipped = f", {done.skipped} skipped as already stored" if done.skipped else ""
    forgotten = f", {done.forgotten} skipped as forgotten" if done.forgotten else ""
    return f"{done.stored} messages of this import stored before it{skipped}{forgotten}"
