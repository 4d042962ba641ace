"""A query of one user (lazymem/agent/querying.py): the method's block over the user's messages as stored
now, timed, and never at the same time as a forget of the same user."""

from __future__ import annotations

import asyncio

import pytest

from lazymem.agent.inputs import Limits
from lazymem.agent.open_users import OpenUsers
from lazymem.agent.querying import Querying
from lazymem.agent.runtime import Runtime
from lazymem.agent.sqlite_store import SQLiteStore
from lazymem.methods.full_history import FullHistory


@pytest.fixture
def querying(tmp_path):
    """Querying with full_history (no retrieval, no LLM roles) over a SQLite store."""
    store, runtime = SQLiteStore(tmp_path), Runtime()
    users = OpenUsers(store, runtime, tmp_path, None, lambda derived: None)
    yield Querying(FullHistory(), runtime, users)
    users.close()
    runtime.close()
    store.close()


def add(querying: Querying, *texts: str) -> list[int]:
    batch = Limits().check_messages([{"role": "user", "text": t} for t in texts], "2025-01-01")
    return querying.users.store.add("t", "kim", batch).ids


def test_a_query_sees_every_message_stored_before_it_and_is_timed(querying):
    ids = add(querying, "I like tea.")
    first = querying.runtime.run(querying.query("t", "kim", "What do I like?", None))
    ids += add(querying, "I ski.")
    recall = querying.runtime.run(querying.query("t", "kim", "What do I do?", "2025-05-05"))
    assert [m["id"] for m in first.messages] == ids[:1] and [m["id"] for m in recall.messages] == ids
    assert "I ski." in recall.text and recall.timings["index"] == 0.0  # nothing to index without retrieval
    assert recall.timings["total"] >= max(recall.timings.values())


def test_a_query_waits_for_a_forget_of_the_same_user(querying):
    ids = add(querying, "a", "b")

    async def go() -> list[int]:
        async with querying.users.lock("t", "kim"):  # as a forget holds it
            query = asyncio.create_task(querying.query("t", "kim", "?", None))
            await asyncio.sleep(0.05)
            assert not query.done()
            querying.users.store.forget("t", "kim", [ids[0]], None)
        return [m["id"] for m in (await query).messages]

    assert querying.runtime.run(go()) == ids[1:]  # the query read what the forget left
