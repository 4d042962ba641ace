"""LazyMem as the memory of an agent: store raw messages cheaply, construct the memory block at query time.

    from lazymem import Memory
    memory = Memory.from_config(["llm=cpu"])            # the same Hydra configs as the experiments
    memory.add("alice", [{"role": "user", "text": "I moved to Lyon in May."}])
    recall = memory.query("alice", "Where do I live?")  # recall.text: what the answer model would read
    memory.forget_all("alice")                           # every message, and everything derived from them

A query runs the configured method (conf/method/, LazyMem by default; `method=rag` is retrieval only)
through the same retrieval and memory model as a benchmark run. Adding a message only writes it to the
store and marks its user for indexing: `aindex_pending` (the service's background indexer) embeds it soon
after, and a query embeds whatever is still missing itself.

What is derived from a user's messages (their embedding cache and the memory model's response cache) lives
where the store puts it: in that user's own folder under `dir/users/` (SQLite), or in rows of the server
database (PostgreSQL). A forget or a retention purge deletes it with the messages: nothing derived from
forgotten text survives, and the next query rebuilds what it needs from what remains. Indexes held in
memory are tagged with the user's generation (lazymem/agent/store.py) and rebuilt when another process
deleted some of the user's messages, so several processes can serve one store.

Every method has an async form (`aadd`, `aquery`, ...) for servers and a sync form for scripts; use one
form per Memory object (the sync form runs the async one on a private event loop thread).
"""

from __future__ import annotations

import asyncio
import dataclasses
import hashlib
import shutil
import threading
import time
import uuid
import weakref
from collections import OrderedDict
from collections.abc import AsyncIterator, Callable, Iterable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from lazymem.agent.errors import BadInput, UnknownUser
from lazymem.agent.inputs import (
    EXPORT_ONLY_FIELDS,
    IMPORT_FIELDS,
    Limits,
    check_key,
    check_message_ids,
    check_text,
    request_digest,
)
from lazymem.agent.recall import Recall
from lazymem.agent.settings import ConfigError, Settings
from lazymem.agent.store import (
    Derived,
    Idempotency,
    Readiness,
    Snapshot,
    Store,
    StoredMessage,
    VectorKeys,
    open_store,
)
from lazymem.agent.user_state import UserState, as_message
from lazymem.agent.vectors import Carried, for_export, for_import
from lazymem.data.schema import History, Question
from lazymem.llm.llm_set import LLMSet, ServerRegistry
from lazymem.methods.base import Context, Method
from lazymem.retrieval.base import UserStorage
from lazymem.retrieval.hybrid import HybridRetriever

DEFAULT_TENANT = "default"
STORE_THREADS = 64  # store calls at once: those over the store's own pool wait in its queue, bounded
_REQUIRED: Any = object()  # forget's message_ids when the caller gave none


@dataclass(frozen=True)
class Imported:
    """What an import did: messages written, and messages skipped as already stored (an earlier import of
    the same source)."""

    stored: int = 0
    skipped: int = 0

    def __add__(self, other: Imported) -> Imported:
        return Imported(self.stored + other.stored, self.skipped + other.skipped)


class ImportStopped(BadInput):
    """A bad message stopped an import; `imported` says what the import had done before it (kept)."""

    def __init__(self, reason: str, imported: Imported):
        super().__init__(f"{reason} ({_stored_before(imported)})")
        self.reason, self.imported = reason, imported


class Memory:
    """The Python API over a `Store`, a method (`lazymem.methods.base.Method`), its retriever and LLM roles.

    `llm` is an LLM config (conf/llm/*.yaml as a dict); the model servers start when a query first needs
    them. `dir` holds the per-user derived data (`users/`) and the model servers' logs (`servers/`).
    `tenant` keeps the users of different API keys apart (the service passes it; scripts keep the default).
    """

    def __init__(
        self,
        store: Store,
        method: Method,
        retriever: HybridRetriever | None = None,
        llm: Mapping[str, Any] | None = None,
        dir: str | Path = "lazymem-memory",
        limits: Limits | None = None,
        max_open_users: int = 64,
        max_open_messages: int = 250_000,
    ):
        if not isinstance(method, Method):
            raise TypeError(f"{type(method).__name__} is not a lazymem.methods.base.Method")
        if method.needs_retrieval and retriever is None:
            raise ValueError(f"method {method.name!r} needs a retriever")
        if method.roles and llm is None:
            raise ValueError(f"method {method.name!r} calls the LLM roles {list(method.roles)}: pass `llm`")
        self.store, self.method, self.retriever = store, method, retriever
        self.llm = dict(llm or {})
        self.dir = Path(dir)
        self.limits = limits or Limits()
        self.max_open_users, self.max_open_messages = max_open_users, max_open_messages
        # one set of model servers for every user, made here: users indexed in parallel must not race to it
        self._registry = (
            ServerRegistry(self.dir / "servers", self.llm.get("model_cache_dir")) if method.roles else None
        )
        self._users: OrderedDict[tuple[str, str], UserState] = OrderedDict()
        # the generation of every user this process keeps derived data for (open or not): what `arefresh`
        # checks against the store
        self._held: dict[tuple[str, str], int] = {}
        self._locks: weakref.WeakValueDictionary[tuple[str, str], asyncio.Lock] = (
            weakref.WeakValueDictionary()
        )
        # Embedding runs in this one thread: it is CPU-bound, and the embedding caches' SQLite connections
        # must stay in the thread that opened them.
        self._indexer = ThreadPoolExecutor(1, thread_name_prefix="lazymem-index")
        # Store calls run in threads of their own: one waiting for the database (up to agent.store.wait_s)
        # must not hold up the calls behind it, as it would in asyncio's default executor (cores + 4)
        self._store_threads = ThreadPoolExecutor(STORE_THREADS, thread_name_prefix="lazymem-store")
        self._loop: asyncio.AbstractEventLoop | None = None
        self._loop_lock = threading.Lock()
        if store.derived_in_store:
            # the user folders are scratch: what a previous run left there may predate a forget
            shutil.rmtree(self.dir / "users", ignore_errors=True)

    @classmethod
    def from_config(cls, overrides: Sequence[str] = ()) -> Memory:
        """From the experiments' configs plus conf/agent/default.yaml, with Hydra overrides."""
        return cls.from_cfg(compose(overrides))

    @classmethod
    def from_cfg(cls, cfg, settings: Settings | None = None) -> Memory:
        """From a composed config: `method`, `retrieval`, `llm` and the `agent` block, whose values are
        checked first (`settings`, when the caller checked them already): a bad one is a ConfigError naming
        its key."""
        from hydra.utils import instantiate
        from omegaconf import OmegaConf

        agent = (settings or Settings.from_cfg(cfg)).agent
        method = instantiate(cfg.method)
        retriever = instantiate(cfg.retrieval) if method.needs_retrieval else None
        return cls(
            open_store(dataclasses.asdict(agent.store), agent.dir),
            method,
            retriever,
            OmegaConf.to_container(cfg.llm, resolve=True),
            agent.dir,
            agent.limits,
            agent.max_open_users,
            agent.max_open_messages,
        )

    # ---- async API

    async def aadd(
        self,
        user_id: str,
        messages: Sequence[Mapping[str, Any]],
        *,
        tenant: str = DEFAULT_TENANT,
        idempotency_key: str | None = None,
    ) -> list[int]:
        """Store messages (each: `role`, `text`, optional `time` and `session_id`); their ids. No model
        runs: the batch is validated and written in one transaction, whole or not at all. With an
        `idempotency_key`, a retry of the same add (same key, same messages) returns the first add's ids
        and stores nothing, for `agent.store.idempotency_ttl_s`; the same key with other messages is an
        IdempotencyConflict."""
        self.limits.check_ids(tenant, user_id)
        key = check_key("idempotency_key", idempotency_key, self.limits.max_id_chars)
        batch = self.limits.check_messages(messages, _now())
        idempotency = None if key is None else Idempotency(key, request_digest(messages))
        added = await self._on_store(self.store.add, tenant, user_id, batch, idempotency)
        return added.ids

    async def aimport(
        self,
        user_id: str,
        messages: Iterable[Mapping[str, Any]],
        *,
        tenant: str = DEFAULT_TENANT,
        batch_size: int | None = None,
        progress: Callable[[int], None] | None = None,
        where: Callable[[int], str] | None = None,
    ) -> Imported:
        """Store a long history in batches (each one transaction, `aadd`'s checks); how many messages were
        stored and how many skipped. A message may also carry `source` (a key of its place in what it came
        from), `aliases` (older keys of the same place) and `vectors` (from an export). A second import of
        the same source, e.g. after a crash, skips what is stored instead of storing it twice. Batches hold
        `batch_size` messages (default and bound: agent.limits.max_messages_per_add). `progress`
        gets the count of messages done after each batch; `where(n)` names the n-th message (from 0) in
        an error (default "message n+1"). A bad message raises ImportStopped, which says what was stored
        before it: the batches before it are kept, its own batch is not."""
        self.limits.check_ids(tenant, user_id)
        if isinstance(messages, (str, bytes, Mapping)) or not isinstance(messages, Iterable):
            raise BadInput(f"messages must be an iterable of messages, got {type(messages).__name__}")
        size = max(1, min(batch_size or self.limits.max_messages_per_add, self.limits.max_messages_per_add))
        where = where or (lambda n: f"message {n + 1}")
        done, chunk = Imported(), []
        for message in messages:
            chunk.append(message)
            if len(chunk) == size:
                done = await self._import_batch(tenant, user_id, chunk, done, progress, where)
                chunk = []
        if chunk:
            done = await self._import_batch(tenant, user_id, chunk, done, progress, where)
        return done

    async def _import_batch(self, tenant, user_id, chunk, done: Imported, progress, where) -> Imported:
        first = done.stored + done.skipped
        try:
            batch = self.limits.check_messages(
                chunk, _now(), first, IMPORT_FIELDS, where, ignored=EXPORT_ONLY_FIELDS
            )
            kept = {}  # the carried vectors this store would have made: {model: {key: vector}}
            if self.retriever is not None and any(m.get("vectors") is not None for m in chunk):
                kept = await asyncio.get_running_loop().run_in_executor(
                    self._indexer,
                    for_import,
                    self.retriever,
                    [as_message(0, m) for m in batch],
                    [m.get("vectors") for m in chunk],
                    lambda i: where(first + i),
                )
        except BadInput as e:
            raise ImportStopped(str(e), done) from None
        if not kept:
            added = await self._on_store(self.store.add, tenant, user_id, batch)
        else:  # under the user's lock: this process's indexer reads the batch only with its vectors
            async with self._user_lock(tenant, user_id):
                added = await self._on_store(self.store.add, tenant, user_id, batch)
                await self._store_vectors(tenant, user_id, kept)
        done += Imported(added.stored, added.skipped)
        if progress is not None:
            progress(done.stored + done.skipped)
        return done

    async def aquery(
        self, user_id: str, question: str, now: str | None = None, *, tenant: str = DEFAULT_TENANT
    ) -> Recall:
        """The memory block for `question` asked at `now` (default: the current time, UTC)."""
        self.limits.check_ids(tenant, user_id)
        check_text("question", question, self.limits.max_question_chars)
        if now is not None:
            check_text("now", now, self.limits.max_id_chars)
        start = time.perf_counter()
        async with self._user_lock(tenant, user_id):
            state = await self._read(tenant, user_id)
            stored, history = state.stored[:], History("user", state.history[:])
            index_s = 0.0
            if state.retriever is not None:
                t0 = time.perf_counter()
                await asyncio.get_running_loop().run_in_executor(
                    self._indexer, state.retriever.index, history
                )
                index_s = time.perf_counter() - t0
                state.warmed = len(stored)
                self._evict()
            asked = Question(uuid.uuid4().hex, "agent", question, "", history.id, date=now or _now())
            block = await self.method.build(asked, history, Context(state.retriever, state.llms))
        timings = {"index": index_s, **block.timings, "total": time.perf_counter() - start}
        return Recall.of(block, stored, history, timings)

    async def aforget(
        self, user_id: str, message_ids: Iterable[int] = _REQUIRED, *, tenant: str = DEFAULT_TENANT
    ) -> int:
        """Delete the given messages (any iterable of ids) and what was derived from them; how many were
        deleted. Unknown ids delete nothing (UnknownMessages); no ids delete nothing and change nothing.
        Deleting every message of a user is `aforget_all`, never a missing argument."""
        self.limits.check_ids(tenant, user_id)
        ids = check_message_ids(None if message_ids is _REQUIRED else message_ids)
        return await self._forget(tenant, user_id, ids)

    async def aforget_all(self, user_id: str, *, tenant: str = DEFAULT_TENANT) -> int:
        """Delete every message of the user, everything derived from them and the user's idempotency keys;
        how many messages were deleted."""
        self.limits.check_ids(tenant, user_id)
        return await self._forget(tenant, user_id, None)

    async def _forget(self, tenant: str, user_id: str, ids: list[int] | None) -> int:
        async with self._user_lock(tenant, user_id):
            known = await self._on_store(self.store.generations, [(tenant, user_id)])
            if not known:  # one row looked up, not the user's whole history read
                raise UnknownUser(user_id)
            if ids == []:
                return 0
            dropped: dict[str, Mapping | None] = {}
            keys = None if ids is None else self._vector_keys(dropped)
            deleted = await self._on_store(self.store.forget, tenant, user_id, ids, keys)
            await self._drop_derived(tenant, user_id, dropped.get(user_id))
        return deleted

    async def aready(self) -> Readiness:
        """Whether the store answers now, with the indexing backlog (StoreUnavailable when it does not)."""
        return await self._on_store(self.store.ready)

    async def aexport(
        self, user_id: str, *, tenant: str = DEFAULT_TENANT, vectors: bool = False
    ) -> list[dict[str, Any]]:
        """Every stored message of the user, oldest first (id, session_id, time, role, text, added). With
        `vectors`, each message the user's indexing has embedded also carries its vectors (lazymem/agent/
        vectors.py), which an import into a store of the same encoder reuses instead of embedding again."""
        pages = self.aexport_pages(user_id, tenant=tenant, vectors=vectors, page=None)
        return [message async for part in pages for message in part]

    async def aexport_pages(
        self, user_id: str, *, tenant: str = DEFAULT_TENANT, vectors: bool = False, page: int | None = 1000
    ) -> AsyncIterator[list[dict[str, Any]]]:
        """`aexport`, `page` messages at a time, each page read from the store when it is wanted, so an
        export of any size holds one page in memory (`lazymem export` and the service's NDJSON export
        stream it). A message deleted while an export runs may be in a page read before the deletion, and
        one added may be in a later page. UnknownUser before the first page."""
        self.limits.check_ids(tenant, user_id)
        after = 0
        while True:
            snapshot = await self._on_store(self.store.snapshot, tenant, user_id, after, page)
            if not snapshot.messages:
                if not after:
                    raise UnknownUser(user_id)
                return
            out = [m.to_dict() for m in snapshot.messages]
            if vectors and self.retriever is not None:
                async with self._user_lock(tenant, user_id):  # a forget does not delete them while read
                    found = await self._read_vectors(tenant, user_id, snapshot)
                for message, carried in zip(out, found, strict=True):
                    if carried is not None:
                        message["vectors"] = carried
            yield out
            if page is None or len(out) < page:
                return
            after = snapshot.messages[-1].id

    async def apurge(self, older_than_days: float, *, tenant: str = DEFAULT_TENANT) -> dict[str, int]:
        """Retention: delete the tenant's messages stored more than `older_than_days` ago, with the derived
        data of every user who lost one; deletions per user (None: another process is purging now)."""
        if isinstance(older_than_days, bool) or not isinstance(older_than_days, (int, float)):
            raise BadInput("older_than_days must be a number")
        if not older_than_days >= 0:  # also refuses NaN
            raise BadInput("older_than_days must be >= 0")
        dropped: dict[str, Mapping | None] = {}
        before = time.time() - older_than_days * 86400
        counts = await self._on_store(self.store.purge, tenant, before, self._vector_keys(dropped))
        for user_id in counts or ():
            async with self._user_lock(tenant, user_id):  # after any query still using the old messages
                await self._drop_derived(tenant, user_id, dropped.get(user_id))
        return counts

    async def aindex_pending(self, lease_s: float = 600.0, chunk: int = 256) -> int:
        """Embed what was added since each user's last indexing, user after user, until none is pending;
        how many users. Users are claimed in the store (a replica that dies leaves its claims to the others
        once `lease_s` runs out), and embedded `chunk` messages at a time, so a query of the same user can
        run in between: it embeds whatever is still missing itself. The service runs this in the
        background (serve.index_every_s); a script may call it after a bulk add."""
        users = 0
        while (claim := await self._on_store(self.store.claim_pending, lease_s)) is not None:
            if await self._index_claim(claim, chunk):
                await self._on_store(self.store.finish, claim)
            users += 1
        return users

    async def _index_claim(self, claim, chunk: int) -> bool:
        """Warm the claimed user's retriever; False when it stopped early (its state was closed by a
        forget, a purge or the LRU bound: a query, or the claim's next holder, does the rest)."""
        if self.retriever is None:
            return True
        key = (claim.tenant, claim.user)
        async with self._user_lock(*key):
            try:
                state = await self._read(*key)
            except UnknownUser:  # forgotten since the add
                return True
            first, messages = state.warmed, state.history[:]

        def warm(part) -> bool:
            if self._users.get(key) is not state:  # closed since: write nothing more for it
                return False
            state.retriever.warm(part)
            return True

        loop = asyncio.get_running_loop()
        for start in range(first, len(messages), chunk):
            if not await loop.run_in_executor(self._indexer, warm, messages[start : start + chunk]):
                return False
            state.warmed = max(state.warmed, min(start + chunk, len(messages)))
        return True

    async def amaintain(self) -> None:
        """Make past deletions final in the store's files (on PostgreSQL: VACUUM FULL and a checkpoint)."""
        await self._on_store(self.store.maintain)

    async def arefresh(self) -> int:
        """Drop what this process derived for users whose messages another process (a replica) deleted
        since; how many users that was. Queries check this themselves; this frees the rest at once."""
        held = dict(self._held)
        current = await self._on_store(self.store.generations, list(held))
        stale = [key for key, generation in held.items() if current.get(key) != generation]
        for tenant, user_id in stale:
            async with self._user_lock(tenant, user_id):
                if self._held.get((tenant, user_id)) == held[(tenant, user_id)]:
                    await self._drop_derived(tenant, user_id)
        return len(stale)

    # ---- sync API

    def add(
        self,
        user_id: str,
        messages: Sequence[Mapping[str, Any]],
        *,
        tenant: str = DEFAULT_TENANT,
        idempotency_key: str | None = None,
    ) -> list[int]:
        return self._run(self.aadd(user_id, messages, tenant=tenant, idempotency_key=idempotency_key))

    def import_(
        self, user_id: str, messages: Iterable[Mapping[str, Any]], *, tenant: str = DEFAULT_TENANT, **kw
    ):
        return self._run(self.aimport(user_id, messages, tenant=tenant, **kw))

    def query(self, user_id: str, question: str, now: str | None = None, *, tenant: str = DEFAULT_TENANT):
        return self._run(self.aquery(user_id, question, now, tenant=tenant))

    def forget(self, user_id: str, message_ids: Iterable[int] = _REQUIRED, *, tenant: str = DEFAULT_TENANT):
        return self._run(self.aforget(user_id, message_ids, tenant=tenant))

    def forget_all(self, user_id: str, *, tenant: str = DEFAULT_TENANT) -> int:
        return self._run(self.aforget_all(user_id, tenant=tenant))

    def ready(self) -> Readiness:
        return self._run(self.aready())

    def export(self, user_id: str, *, tenant: str = DEFAULT_TENANT, vectors: bool = False):
        return self._run(self.aexport(user_id, tenant=tenant, vectors=vectors))

    def export_pages(self, user_id: str, *, tenant: str = DEFAULT_TENANT, **kw) -> Iterator[list[dict]]:
        pages = self.aexport_pages(user_id, tenant=tenant, **kw)

        async def next_page() -> list[dict] | None:
            return await anext(pages, None)

        try:
            while (part := self._run(next_page())) is not None:
                yield part
        finally:
            self._run(pages.aclose())

    def purge(self, older_than_days: float, *, tenant: str = DEFAULT_TENANT):
        return self._run(self.apurge(older_than_days, tenant=tenant))

    def maintain(self) -> None:
        return self._run(self.amaintain())

    def index_pending(self, **kw) -> int:
        return self._run(self.aindex_pending(**kw))

    def close(self) -> None:
        """Close every user's caches, stop the model servers this Memory started, close the store."""
        states, self._users = list(self._users.values()), OrderedDict()
        for state in states:
            self._indexer.submit(state.close).result()
        self._indexer.shutdown()
        self._store_threads.shutdown()
        if self._registry is not None:
            self._registry.close()
        self.store.close()
        if self._loop is not None:
            self._loop.call_soon_threadsafe(self._loop.stop)

    def __enter__(self) -> Memory:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    # ---- internals

    def _run(self, coro):
        with self._loop_lock:
            if self._loop is None:
                self._loop = asyncio.new_event_loop()
                threading.Thread(target=self._loop.run_forever, name="lazymem-memory", daemon=True).start()
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result()

    async def _on_store(self, call: Callable[..., Any], *args: Any) -> Any:
        return await asyncio.get_running_loop().run_in_executor(self._store_threads, call, *args)

    def _user_lock(self, tenant: str, user_id: str) -> asyncio.Lock:
        """One query or forget at a time per user, so a forget never races a query that would write
        derived data of the forgotten messages after it."""
        key = (tenant, user_id)
        lock = self._locks.get(key)
        if lock is None:
            lock = self._locks[key] = asyncio.Lock()
        return lock

    def _user_dir(self, tenant: str, user_id: str) -> Path:
        """A folder named by a hash: ids never become paths or file names."""
        digest = hashlib.sha256(f"{tenant}\x1f{user_id}".encode()).hexdigest()[:32]
        return self.dir / "users" / digest

    async def _read(self, tenant: str, user_id: str) -> UserState:
        """The user's open state with their messages read up to now (under the user's lock). An open state
        reads only what was added since its last read; a new one, or one whose generation is gone (a
        deletion since), reads them all."""
        old = self._users.get((tenant, user_id))
        after = old.last_id if old is not None else 0
        snapshot = await self._on_store(self.store.snapshot, tenant, user_id, after)
        if snapshot.generation is None:
            raise UnknownUser(user_id)
        state = await self._state(tenant, user_id, snapshot.generation)
        if state is not old and after:  # the open state went while only the new messages were read
            snapshot = await self._on_store(self.store.snapshot, tenant, user_id)
            if snapshot.generation is None:
                raise UnknownUser(user_id)
            state = await self._state(tenant, user_id, snapshot.generation)
        state.extend(snapshot.messages)
        return state

    async def _state(self, tenant: str, user_id: str, generation: int) -> UserState:
        """The user's open state at `generation`; one built at another generation (some of the user's
        messages were deleted since, maybe by another process) is dropped with its derived data first."""
        key = (tenant, user_id)
        if key in self._held and self._held[key] != generation:
            await self._drop_derived(tenant, user_id)
        state = self._users.get(key)
        if state is None:
            derived = self.store.derived(tenant, user_id, self._user_dir(tenant, user_id), generation)
            state = self._users[key] = UserState(
                generation, self._user_retriever(derived), self._user_llms(derived)
            )
            self._held[key] = generation
        self._users.move_to_end(key)
        self._evict()
        return state

    def _evict(self) -> None:
        """Close the least recently used users' states (reopened lazily if they come back) while more than
        `max_open_users` are open or their indexes hold more than `max_open_messages` messages; the most
        recent one stays open whatever its size."""
        total = sum(state.messages for state in self._users.values())
        while len(self._users) > 1 and (
            len(self._users) > self.max_open_users or total > self.max_open_messages
        ):
            _, old = self._users.popitem(last=False)
            total -= old.messages
            self._indexer.submit(old.close)

    def _user_retriever(self, derived: Derived) -> HybridRetriever | None:
        """The shared retriever's per-user form: shared models, the user's own derived data."""
        return None if self.retriever is None else self.retriever.for_user(derived.storage)

    def _user_llms(self, derived: Derived):
        if not self.method.roles:
            return None
        cfg = {**self.llm, "cache_path": str(derived.storage.dir / "llm.sqlite")}
        return LLMSet(cfg, self.dir / "servers", self._registry, cache=derived.llm_cache())

    def _vector_keys(self, into: dict[str, Mapping | None]) -> VectorKeys | None:
        """For a deletion: the vector keys of each user's deleted messages (what the store drops from its
        derived rows), also kept in `into` by user (what a local user folder drops)."""
        if self.retriever is None:
            return None

        def keys(user_id: str, deleted: Sequence[StoredMessage]) -> Mapping | None:
            messages = [as_message(i, m) for i, m in enumerate(deleted)]
            into[user_id] = self.retriever.vector_keys(messages)
            return into[user_id]

        return keys

    async def _read_vectors(self, tenant: str, user_id: str, snapshot: Snapshot) -> list[Carried | None]:
        """Each of the snapshot's messages' vectors in the user's embedding cache (under the user's lock)."""
        dir = self._user_dir(tenant, user_id)
        if not self.store.derived_in_store and not dir.exists():  # a local folder not made yet: no vectors
            return [None] * len(snapshot.messages)
        derived = self.store.derived(tenant, user_id, dir, snapshot.generation)
        messages = [as_message(i, m) for i, m in enumerate(snapshot.messages)]
        return await self._on_embedding_cache(
            derived, lambda cache: for_export(self.retriever, cache, messages)
        )

    async def _store_vectors(self, tenant: str, user_id: str, vectors: Mapping[str, dict]) -> None:
        """Put imported vectors ({model: {key: vector}}) into the user's embedding cache (under the user's
        lock), at the user's current generation: on a server database the rows refuse a write under an
        older one."""
        known = await self._on_store(self.store.generations, [(tenant, user_id)])
        if (tenant, user_id) not in known:  # forgotten since the add (by another process)
            return
        derived = self.store.derived(
            tenant, user_id, self._user_dir(tenant, user_id), known[(tenant, user_id)]
        )

        def put(cache) -> None:
            for model, items in vectors.items():
                cache.put(model, items)

        await self._on_embedding_cache(derived, put)

    async def _on_embedding_cache(self, derived: Derived, work: Callable[[Any], Any]) -> Any:
        """`work(cache)` on the user's embedding cache, opened and closed in the indexer thread (where the
        caches' SQLite connections live)."""

        def run() -> Any:
            cache = derived.storage.embedding_cache()
            try:
                return work(cache)
            finally:
                cache.close()

        return await asyncio.get_running_loop().run_in_executor(self._indexer, run)

    async def _drop_derived(self, tenant: str, user_id: str, keep_vectors_but: Mapping | None = None) -> None:
        """Close the user's state and delete its derived data here: all of it, or (`keep_vectors_but`:
        the deleted messages' vector keys, on a store whose user folders are the derived data) all but the
        vectors of the user's remaining messages."""
        state = self._users.pop((tenant, user_id), None)
        self._held.pop((tenant, user_id), None)
        loop = asyncio.get_running_loop()
        if state is not None:
            await loop.run_in_executor(self._indexer, state.close)
        dir = self._user_dir(tenant, user_id)
        trim = keep_vectors_but is not None and not self.store.derived_in_store and dir.exists()
        if trim and await self._on_store(self.store.generations, [(tenant, user_id)]):  # messages left
            await loop.run_in_executor(self._indexer, UserStorage(dir).keep_vectors, keep_vectors_but)
        else:
            await asyncio.to_thread(shutil.rmtree, dir, True)


def compose(overrides: Sequence[str] = ()):
    """The root config plus conf/agent/default.yaml (or the `+agent=NAME` among `overrides`), composed
    outside any Hydra app. A bad override is a ConfigError of one line (Hydra's spans several, and a
    missing config's lists the search path)."""
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir
    from hydra.errors import HydraException, MissingConfigException
    from omegaconf.errors import OmegaConfBaseException

    from lazymem.conf import CONF_DIR

    overrides = list(overrides)
    if not any(o.lstrip("+~").startswith("agent=") for o in overrides):
        overrides.insert(0, "+agent=default")
    try:
        with initialize_config_dir(str(CONF_DIR), version_base=None):
            return hydra_compose("config", overrides=overrides)
    except MissingConfigException as e:
        options = f"; choose one of {', '.join(e.options)}" if e.options else ""
        raise ConfigError(f"no config {e.missing_cfg_file!r}{options}") from None
    except (HydraException, OmegaConfBaseException) as e:
        reason = " ".join(line.strip() for line in str(e).splitlines() if line.strip())
        raise ConfigError(reason) from None


def _stored_before(done: Imported) -> str:
    skipped = f", {done.skipped} skipped as already stored" if done.skipped else ""
    return f"{done.stored} messages of this import stored before it{skipped}"


def _now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
