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

import time
from collections.abc import AsyncIterator, Callable, Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from lazymem.agent.config_block import finite
from lazymem.agent.errors import BadInput
from lazymem.agent.forgetting import Forgetting
from lazymem.agent.indexing import Indexing
from lazymem.agent.inputs import Limits, check_key, check_message_ids, check_text, request_digest
from lazymem.agent.moving import Imported, ImportStopped, Moving
from lazymem.agent.open_users import OpenUsers
from lazymem.agent.querying import Querying
from lazymem.agent.recall import Recall
from lazymem.agent.reembedding import Reembedding
from lazymem.agent.runtime import Runtime, utc_now
from lazymem.agent.settings import Settings
from lazymem.agent.store import Derived, Idempotency, Readiness, Store, open_store
from lazymem.agent.telemetry import (
    CREATE_MEMORY,
    DELETE_MEMORY,
    EXPORT_MEMORY,
    SEARCH_MEMORY,
    UPSERT_MEMORY,
    Telemetry,
    traced,
    traced_pages,
)
from lazymem.agent.user_retrieval import UserRetrieval
from lazymem.llm.llm_set import LLMSet, ServerRegistry
from lazymem.methods.base import Method
from lazymem.retrieval.hybrid import HybridRetriever

__all__ = ["DEFAULT_TENANT", "BadInput", "Imported", "ImportStopped", "Memory"]

DEFAULT_TENANT = "default"
_REQUIRED: Any = object()  # forget's message_ids when the caller gave none


class Memory:
    """The Python API over a `Store`, a method (`lazymem.methods.base.Method`), its retriever and LLM roles.

    `llm` is an LLM config (conf/llm/*.yaml as a dict); the model servers start when a query first needs
    them. `dir` holds the per-user derived data (`users/`) and the model servers' logs (`servers/`).
    `tenant` keeps the users of different API keys apart (the service passes it; scripts keep the default).
    """

    # A facade over small parts, each with one job: the threads and loop (runtime.py), the open users and
    # their locks (open_users.py), queries (querying.py), indexing claims (indexing.py), imports and
    # exports (moving.py), deletions (forgetting.py). The checks of every call's arguments stay here.

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
        telemetry: Telemetry | None = None,
    ):
        if not isinstance(method, Method):
            raise TypeError(f"{type(method).__name__} is not a lazymem.methods.base.Method")
        if method.needs_retrieval and retriever is None:
            raise ValueError(f"method {method.name!r} needs a retriever")
        if method.roles and llm is None:
            raise ValueError(f"method {method.name!r} calls the LLM roles {list(method.roles)}: pass `llm`")
        self.store, self.method, self.retriever = store, method, retriever
        # the shared retrieval composed per user; checks each entry for the per-user port
        self.user_retrieval = None if retriever is None else UserRetrieval(retriever)
        self.llm, self.dir, self.limits = dict(llm or {}), Path(dir), limits or Limits()
        # traces and metrics (lazymem/agent/telemetry.py): off unless given, closed (flushed) with this Memory
        self.telemetry = telemetry or Telemetry()
        # one set of model servers for every user, made here: users indexed in parallel must not race to it
        self._registry = (
            ServerRegistry(self.dir / "servers", self.llm.get("model_cache_dir")) if method.roles else None
        )
        self._runtime = rt = Runtime()
        self.open_users = users = OpenUsers(
            store, rt, self.dir, self.user_retrieval, self._user_llms, max_open_users, max_open_messages
        )
        self._querying = Querying(method, rt, users)
        self._indexing = Indexing(store, rt, users, retriever is not None)
        self._moving = Moving(store, rt, users, self.limits, self.user_retrieval)
        self._forgetting = Forgetting(store, rt, users, self.user_retrieval)
        # after a change of encoder: the users to embed again, and their other vectors to delete
        self.reembedding = Reembedding(store, rt, users, self._indexing, self.user_retrieval, self.dir)

    @classmethod
    def from_config(cls, overrides: Sequence[str] = ()) -> Memory:
        """From the experiments' configs plus conf/agent/default.yaml, with Hydra overrides, checked as a
        task's config is (lazymem/agent/entry.py): a bad value or a missing model is a ConfigError."""
        from lazymem.agent.entry import load

        return cls.from_cfg(*load(overrides))

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
        llm = OmegaConf.to_container(cfg.llm, resolve=True)
        return cls(
            open_store(cfg.agent.store),
            method,
            retriever,
            llm,
            agent.dir,
            agent.limits,
            agent.max_open_users,
            agent.max_open_messages,
            Telemetry.from_settings(agent.telemetry),
        )

    # ---- async API

    @traced(CREATE_MEMORY)
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
        batch = self.limits.check_messages(messages, utc_now())
        idempotency = None if key is None else Idempotency(key, request_digest(messages))
        added = await self._runtime.on_store(self.store.add, tenant, user_id, batch, idempotency)
        self.telemetry.records(stored=added.stored, skipped=len(added.ids) - added.stored)  # a replay too
        return added.ids

    @traced(UPSERT_MEMORY)
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
        return await self._moving.import_(tenant, user_id, messages, batch_size, progress, where)

    @traced(SEARCH_MEMORY)
    async def aquery(
        self, user_id: str, question: str, now: str | None = None, *, tenant: str = DEFAULT_TENANT
    ) -> Recall:
        """The memory block for `question` asked at `now` (default: the current time, UTC)."""
        self.limits.check_ids(tenant, user_id)
        check_text("question", question, self.limits.max_question_chars)
        if now is not None:
            check_text("now", now, self.limits.max_id_chars)
        return await self._querying.query(tenant, user_id, question, now)

    @traced(DELETE_MEMORY)
    async def aforget(
        self, user_id: str, message_ids: Iterable[int] = _REQUIRED, *, tenant: str = DEFAULT_TENANT
    ) -> int:
        """Delete the given messages (any iterable of ids) and what was derived from them; how many were
        deleted. Unknown ids delete nothing (UnknownMessages); no ids delete nothing and change nothing.
        Deleting every message of a user is `aforget_all`, never a missing argument."""
        self.limits.check_ids(tenant, user_id)
        ids = check_message_ids(None if message_ids is _REQUIRED else message_ids)
        return await self._forgetting.forget(tenant, user_id, ids)

    @traced(DELETE_MEMORY)
    async def aforget_all(self, user_id: str, *, tenant: str = DEFAULT_TENANT) -> int:
        """Delete every message of the user, everything derived from them and the user's idempotency keys;
        how many messages were deleted."""
        self.limits.check_ids(tenant, user_id)
        return await self._forgetting.forget(tenant, user_id, None)

    async def aready(self) -> Readiness:
        """Whether the store answers now, with the indexing backlog (StoreUnavailable when it does not)."""
        return await self._runtime.on_store(self.store.ready)

    async def aexport(
        self, user_id: str, *, tenant: str = DEFAULT_TENANT, vectors: bool = False
    ) -> list[dict[str, Any]]:
        """Every stored message of the user, oldest first (id, session_id, time, role, text, added). With
        `vectors`, each message the user's indexing has embedded also carries its vectors (lazymem/agent/
        vectors.py), which an import into a store of the same encoder reuses instead of embedding again."""
        pages = self.aexport_pages(user_id, tenant=tenant, vectors=vectors, page=None)
        return [message async for part in pages for message in part]

    @traced_pages(EXPORT_MEMORY)
    def aexport_pages(
        self, user_id: str, *, tenant: str = DEFAULT_TENANT, vectors: bool = False, page: int | None = 1000
    ) -> AsyncIterator[list[dict[str, Any]]]:
        """`aexport`, `page` messages at a time, each page read from the store when it is wanted, so an
        export of any size holds one page in memory (`lazymem export` and the service's NDJSON export
        stream it). A message deleted while an export runs may be in a page read before the deletion, and
        one added may be in a later page. UnknownUser before the first page."""
        return self._moving.pages(tenant, user_id, vectors, page)

    async def apurge(self, older_than_days: float, *, tenant: str = DEFAULT_TENANT) -> dict[str, int]:
        """Retention: delete the tenant's messages stored more than `older_than_days` ago, with the derived
        data of every user who lost one; deletions per user (None: another process is purging now)."""
        days = finite(older_than_days)
        if days is None or days < 0:  # also refuses NaN, the infinities and an int too large for a float
            raise BadInput("older_than_days must be a finite number >= 0")
        return await self._forgetting.purge(tenant, time.time() - days * 86400)

    async def aindex_pending(self, lease_s: float = 600.0, chunk: int = 256) -> int:
        """Embed what was added since each user's last indexing, user after user, until none is pending;
        how many users. Users are claimed in the store (a replica that dies leaves its claims to the others
        once `lease_s` runs out), and embedded `chunk` messages at a time, so a query of the same user can
        run in between: it embeds whatever is still missing itself. The service runs this in the
        background (serve.index_every_s); a script may call it after a bulk add."""
        return await self._indexing.pending(lease_s, chunk)

    async def areembed(self, lease_s: float = 600.0, chunk: int = 256) -> dict:
        """After a change of encoder: embed again, under the current one, every user whose vectors another
        encoder made, and delete those (lazymem/agent/reembedding.py); its status. The service does it in
        the background at start-up; queries meanwhile use the current encoder only."""
        return await self.reembedding.complete(lease_s, chunk)

    async def amaintain(self) -> None:
        """Make past deletions final in the store's files (on PostgreSQL: VACUUM FULL and a checkpoint)."""
        await self._runtime.on_store(self.store.maintain)

    async def arefresh(self) -> int:
        """Drop what this process derived for users whose messages another process (a replica) deleted
        since; how many users that was. Queries check this themselves; this frees the rest at once."""
        return await self.open_users.refresh()

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
        self, user_id: str, messages: Iterable[Mapping], *, tenant: str = DEFAULT_TENANT, **kw
    ) -> Imported:
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
        return self._runtime.iterate(self.aexport_pages(user_id, tenant=tenant, **kw))

    def purge(self, older_than_days: float, *, tenant: str = DEFAULT_TENANT):
        return self._run(self.apurge(older_than_days, tenant=tenant))

    def maintain(self) -> None:
        return self._run(self.amaintain())

    def reembed(self, **kw) -> dict:
        return self._run(self.areembed(**kw))

    def index_pending(self, **kw) -> int:
        return self._run(self.aindex_pending(**kw))

    def close(self) -> None:
        """Close every user's caches, stop the model servers this Memory started, close the store, and
        export what the telemetry still holds."""
        self.open_users.close()
        self._runtime.close()
        if self._registry is not None:
            self._registry.close()
        self.store.close()
        self.telemetry.close()

    def __enter__(self) -> Memory:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def _run(self, coro):
        """The sync form: `coro` run on this Memory's private event loop thread."""
        return self._runtime.run(coro)

    def _user_llms(self, derived: Derived) -> LLMSet | None:
        """A user's LLM roles, with the user's own response cache (None: the method calls none)."""
        if not self.method.roles:
            return None
        cfg = {**self.llm, "cache_path": str(derived.storage.dir / "llm.sqlite")}
        return LLMSet(cfg, self.dir / "servers", self._registry, cache=derived.llm_cache())
