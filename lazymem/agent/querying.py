"""A query of one user: their open state read up to now, its index grown by what was added since, and the
configured method's memory block built over it, under the user's lock."""

from __future__ import annotations

import time
import uuid

from lazymem.agent.open_users import OpenUsers
from lazymem.agent.recall import Recall
from lazymem.agent.runtime import Runtime, utc_now
from lazymem.data.schema import History, Question
from lazymem.methods.base import Context, Method


class Querying:
    """The queries of one Memory, through its open users."""

    def __init__(self, method: Method, runtime: Runtime, users: OpenUsers):
        self.method, self.runtime, self.users = method, runtime, users

    async def query(self, tenant: str, user_id: str, question: str, now: str | None) -> Recall:
        """`Memory.aquery`, its arguments checked; the timings include the index's growth (`index`) and
        the whole query (`total`)."""
        start = time.perf_counter()
        async with self.users.lock(tenant, user_id):
            state = await self.users.read(tenant, user_id)
            stored, history = state.stored[:], History("user", state.history[:])
            index_s = 0.0
            if state.retriever is not None:
                t0 = time.perf_counter()
                await self.runtime.on_indexer(state.retriever.hybrid.index, history)
                index_s = time.perf_counter() - t0
                state.warmed = len(stored)
                self.users.evict()  # the index grew: the open users may be over their bound now
            asked = Question(uuid.uuid4().hex, "agent", question, "", history.id, date=now or utc_now())
            hybrid = None if state.retriever is None else state.retriever.hybrid
            block = await self.method.build(asked, history, Context(hybrid, state.llms))
        timings = {"index": index_s, **block.timings, "total": time.perf_counter() - start}
        return Recall.of(block, stored, history, timings)
