"""Deleting messages with what was derived from them: a forget of one user's messages, and a retention purge
of a tenant's old ones. The store deletes the messages and its derived rows; the open users drop their
states and what their folders hold."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from lazymem.agent.errors import UnknownUser
from lazymem.agent.open_users import OpenUsers
from lazymem.agent.runtime import Runtime
from lazymem.agent.store import Store, StoredMessage, VectorKeys
from lazymem.agent.user_retrieval import UserRetrieval
from lazymem.agent.user_state import as_message


class Forgetting:
    """Forgets and purges of one Memory; `retrieval` names the vectors of deleted messages (None: the method
    retrieves nothing, so no vectors were made)."""

    def __init__(self, store: Store, runtime: Runtime, users: OpenUsers, retrieval: UserRetrieval | None):
        self.store, self.runtime, self.users, self.retrieval = store, runtime, users, retrieval

    async def forget(self, tenant: str, user_id: str, ids: list[int] | None) -> int:
        """Delete the user's messages `ids` (None: all of them); how many were deleted. UnknownUser for a
        user without messages, even when `ids` is empty."""
        async with self.users.lock(tenant, user_id):
            known = await self.runtime.on_store(self.store.generations, [(tenant, user_id)])
            if not known:  # one row looked up, not the user's whole history read
                raise UnknownUser(user_id)
            if ids == []:
                return 0
            dropped: dict[str, Mapping | None] = {}
            keys = None if ids is None else self._vector_keys(dropped)
            deleted = await self.runtime.on_store(self.store.forget, tenant, user_id, ids, keys)
            await self.users.drop(tenant, user_id, dropped.get(user_id))
        return deleted

    async def purge(self, tenant: str, before: float) -> dict[str, int] | None:
        """Delete the tenant's messages stored before the Unix time `before`; deletions per user (None:
        another process is purging now)."""
        dropped: dict[str, Mapping | None] = {}
        counts = await self.runtime.on_store(self.store.purge, tenant, before, self._vector_keys(dropped))
        for user_id in counts or ():
            async with self.users.lock(tenant, user_id):  # after any query still using the old messages
                await self.users.drop(tenant, user_id, dropped.get(user_id))
        return counts

    def _vector_keys(self, into: dict[str, Mapping | None]) -> VectorKeys | None:
        """For a deletion: the vector keys of each user's deleted messages (what the store drops from its
        derived rows), also kept in `into` by user (what a local user folder drops)."""
        if self.retrieval is None:
            return None

        def keys(user_id: str, deleted: Sequence[StoredMessage]) -> Mapping | None:
            messages = [as_message(i, m) for i, m in enumerate(deleted)]
            into[user_id] = self.retrieval.vector_keys(messages)
            return into[user_id]

        return keys
