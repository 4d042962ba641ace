"""Indexing ahead of queries: claim the users the store marks pending and embed what was added since their
last indexing, a chunk at a time, so that a query of the same user can run in between."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence

from lazymem.agent.errors import UnknownUser
from lazymem.agent.open_users import Key, OpenUsers
from lazymem.agent.runtime import Runtime
from lazymem.agent.store import Claim, Store
from lazymem.agent.user_state import UserState
from lazymem.data.schema import Message

# Called once a claimed user is warmed to the end: (user, their state, the messages warmed)
AfterWarm = Callable[[Key, UserState, Sequence[Message]], Awaitable[None]]


class Indexing:
    """Warms the open users' retrievers; `retrieves` is False for a method without retrieval (a claim is
    then only finished). `after_warm`, when set (lazymem/agent/reembedding.py sets it while a change of
    encoder is carried out), runs once a claimed user is warmed to the end, before the claim is finished."""

    def __init__(self, store: Store, runtime: Runtime, users: OpenUsers, retrieves: bool):
        self.store, self.runtime, self.users, self.retrieves = store, runtime, users, retrieves
        self.after_warm: AfterWarm | None = None

    async def pending(self, lease_s: float = 600.0, chunk: int = 256) -> int:
        """Index claimed users until none is pending; how many users."""
        users = 0
        while (claim := await self.runtime.on_store(self.store.claim_pending, lease_s)) is not None:
            if await self._index(claim, chunk):
                await self.runtime.on_store(self.store.finish, claim)
            users += 1
        return users

    async def _index(self, claim: Claim, chunk: int) -> bool:
        """Warm the claimed user's retriever; False when it stopped early (its state was closed by a
        forget, a purge or the LRU bound: a query, or the claim's next holder, does the rest)."""
        if not self.retrieves:
            return True
        key = (claim.tenant, claim.user)
        async with self.users.lock(*key):
            try:
                state = await self.users.read(*key)
            except UnknownUser:  # forgotten since the add
                return True
            first, messages = state.warmed, state.history[:]

        def warm(part) -> bool:
            if self.users.get(key) is not state:  # closed since: write nothing more for it
                return False
            state.retriever.warm(part)
            return True

        for start in range(first, len(messages), chunk):
            if not await self.runtime.on_indexer(warm, messages[start : start + chunk]):
                return False
            state.warmed = max(state.warmed, min(start + chunk, len(messages)))
        if self.after_warm is not None:
            await self.after_warm(key, state, messages)
        return True
