"""The users one process holds open: their states (indexes, LLM roles) in an LRU bounded by users and by
messages, the generation each user's derived data here was built at, one lock per user, and the user folders.

A state is built at one generation of the user's messages (lazymem/agent/store.py). When the store's
generation moved (some of the user's messages were deleted, maybe by another process), the state and what
was derived here go, and the next read builds them again from what remains.
"""

from __future__ import annotations

import asyncio
import hashlib
import shutil
import weakref
from collections import OrderedDict
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from lazymem.agent.errors import StoreUnavailable, UnknownUser
from lazymem.agent.runtime import Runtime
from lazymem.agent.store import Derived, Store
from lazymem.agent.user_retrieval import LocalUserStorage, UserRetrieval
from lazymem.agent.user_state import UserState

Key = tuple[str, str]  # (tenant, user id)
LOCK_POLL_S = 0.1  # how often a call waiting for a user's lock looks whether the store is reachable


def user_digest(tenant: str, user_id: str) -> str:
    """A digest of a tenant and user id: the name of the user's folder, and the memory's id in telemetry
    (lazymem/agent/telemetry.py), so that neither shows the id."""
    return hashlib.sha256(f"{tenant}\x1f{user_id}".encode()).hexdigest()[:32]


class OpenUsers:
    """The open users of one Memory. `llms(derived)` builds a user's LLM roles (None: the method calls
    none); `retrieval` is the shared retrieval composed per user (None: the method retrieves nothing)."""

    def __init__(
        self,
        store: Store,
        runtime: Runtime,
        dir: Path,
        retrieval: UserRetrieval | None,
        llms: Callable[[Derived], Any],
        max_users: int = 64,
        max_messages: int = 250_000,
    ):
        self.store, self.runtime, self.dir, self.retrieval, self.llms = store, runtime, dir, retrieval, llms
        self.max_users, self.max_messages = max_users, max_messages
        self._users: OrderedDict[Key, UserState] = OrderedDict()
        # the generation of every user this process keeps derived data for (open or not): what `refresh`
        # checks against the store
        self._held: dict[Key, int] = {}
        self._locks: weakref.WeakValueDictionary[Key, asyncio.Lock] = weakref.WeakValueDictionary()
        if store.derived_in_store:
            # the user folders are scratch: what a previous run left there may predate a forget
            shutil.rmtree(dir / "users", ignore_errors=True)

    def recency(self) -> list[Key]:
        """The open users, least recently used first."""
        return list(self._users)

    def get(self, key: Key) -> UserState | None:
        return self._users.get(key)

    def lock(self, tenant: str, user_id: str) -> UserLock:
        """One query or forget at a time per user, so a forget never races a query that would write
        derived data of the forgotten messages after it. Waiting for it ends with StoreUnavailable once the
        store is known to be unreachable: the holder may be waiting on the store itself, and every call
        behind it would otherwise wait its turn for the same answer."""
        key = (tenant, user_id)
        lock = self._locks.get(key)
        if lock is None:
            lock = self._locks[key] = asyncio.Lock()
        return UserLock(lock, self.store.unreachable)

    def folder(self, tenant: str, user_id: str) -> Path:
        """A folder named by a hash: ids never become paths or file names."""
        return self.dir / "users" / user_digest(tenant, user_id)

    def derived(self, tenant: str, user_id: str, generation: int) -> Derived:
        """Where the store keeps what is derived from the user's messages at `generation`."""
        return self.store.derived(tenant, user_id, self.folder(tenant, user_id), generation)

    async def read(self, tenant: str, user_id: str) -> UserState:
        """The user's open state with their messages read up to now (under the user's lock). An open state
        reads only what was added since its last read; a new one, or one whose generation is gone (a
        deletion since), reads them all."""
        old = self._users.get((tenant, user_id))
        after = old.last_id if old is not None else 0
        snapshot = await self.runtime.on_store(self.store.snapshot, tenant, user_id, after)
        if snapshot.generation is None:
            raise UnknownUser(user_id)
        state = await self._state(tenant, user_id, snapshot.generation)
        if state is not old and after:  # the open state went while only the new messages were read
            snapshot = await self.runtime.on_store(self.store.snapshot, tenant, user_id)
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
            await self.drop(tenant, user_id)
        state = self._users.get(key)
        if state is None:
            derived = self.derived(tenant, user_id, generation)
            retriever = None
            if self.retrieval is not None:  # in the indexer thread: opening the caches may read the store
                retriever = await self.runtime.on_indexer(self.retrieval.for_user, derived.storage)
            state = self._users[key] = UserState(generation, retriever, self.llms(derived))
            self._held[key] = generation
        self._users.move_to_end(key)
        self.evict()
        return state

    def evict(self) -> None:
        """Close the least recently used users' states (reopened lazily if they come back) while more than
        `max_users` are open or their indexes hold more than `max_messages` messages; the most recent one
        stays open whatever its size."""
        total = sum(state.messages for state in self._users.values())
        while len(self._users) > 1 and (len(self._users) > self.max_users or total > self.max_messages):
            _, old = self._users.popitem(last=False)
            total -= old.messages
            self.runtime.to_indexer(old.close)

    async def drop(self, tenant: str, user_id: str, keep_vectors_but: Mapping | None = None) -> None:
        """Close the user's state and delete its derived data here: all of it, or (`keep_vectors_but`:
        the deleted messages' vector keys, on a store whose user folders are the derived data) all but the
        vectors of the user's remaining messages."""
        state = self._users.pop((tenant, user_id), None)
        self._held.pop((tenant, user_id), None)
        if state is not None:
            await self.runtime.on_indexer(state.close)
        dir = self.folder(tenant, user_id)
        trim = keep_vectors_but is not None and not self.store.derived_in_store and dir.exists()
        if trim and await self.runtime.on_store(self.store.generations, [(tenant, user_id)]):  # messages left
            await self.runtime.on_indexer(LocalUserStorage(dir).keep_vectors, keep_vectors_but)
        else:
            await asyncio.to_thread(shutil.rmtree, dir, True)

    async def refresh(self) -> int:
        """Drop what was derived here for users whose generation moved in the store since (another process
        deleted some of their messages); how many users that was."""
        held = dict(self._held)
        current = await self.runtime.on_store(self.store.generations, list(held))
        stale = [key for key, generation in held.items() if current.get(key) != generation]
        for tenant, user_id in stale:
            async with self.lock(tenant, user_id):
                if self._held.get((tenant, user_id)) == held[(tenant, user_id)]:
                    await self.drop(tenant, user_id)
        return len(stale)

    def close(self) -> None:
        """Close every open state, each in the indexer thread, where its caches' connections live."""
        states, self._users = list(self._users.values()), OrderedDict()
        for state in states:
            self.runtime.to_indexer(state.close).result()


class UserLock:
    """`async with` a user's lock: acquired, or StoreUnavailable as soon as `unreachable()` gives a reason
    while waiting (looked at every LOCK_POLL_S)."""

    def __init__(self, lock: asyncio.Lock, unreachable: Callable[[], str | None]):
        self.lock, self.unreachable = lock, unreachable

    async def __aenter__(self) -> None:
        if not self.lock.locked():
            await self.lock.acquire()
            return
        waiting = asyncio.ensure_future(self.lock.acquire())
        try:
            while not (await asyncio.wait({waiting}, timeout=LOCK_POLL_S))[0]:
                why = self.unreachable()
                if why is not None:
                    raise StoreUnavailable(f"gave up waiting for the user's previous call: {why}")
        except BaseException:
            waiting.cancel()  # asyncio.Lock hands the lock on to the next waiter if it was granted meanwhile
            raise
        waiting.result()

    async def __aexit__(self, *exc: object) -> None:
        self.lock.release()
