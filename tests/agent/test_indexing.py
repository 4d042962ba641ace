"""Indexing ahead of queries (lazymem/agent/indexing.py): claimed users are embedded before their first
query, once; a claim is finished only when its user was indexed to the end."""

from __future__ import annotations

import asyncio

from lazymem.agent.indexing import Indexing
from lazymem.agent.inputs import Limits
from lazymem.agent.open_users import OpenUsers
from lazymem.agent.runtime import Runtime
from lazymem.agent.sqlite_store import SQLiteStore


def test_without_retrieval_each_claim_is_finished_and_nothing_is_opened(tmp_path):
    store, runtime = SQLiteStore(tmp_path), Runtime()
    users = OpenUsers(store, runtime, tmp_path, None, lambda derived: None)
    for user in ("kim", "lee"):
        store.add("t", user, Limits().check_messages([{"role": "user", "text": "hi"}], "2025-01-01"))
    assert store.ready().backlog == 2
    indexing = Indexing(store, runtime, users, retrieves=False)
    assert runtime.run(indexing.pending()) == 2 and runtime.run(indexing.pending()) == 0
    assert store.ready().backlog == 0 and users.recency() == []
    runtime.close()
    store.close()


def test_a_claim_whose_user_was_dropped_between_chunks_stays_pending(tmp_path):
    """A forget closed the user between two chunks: nothing more is written for that state, and the claim
    is not finished, so its next holder (or a query) embeds the rest."""
    store, runtime = SQLiteStore(tmp_path), Runtime()

    async def running_loop():
        return asyncio.get_running_loop()

    loop, parts = runtime.run(running_loop()), []

    class Warms:  # each user's retrieval: records what it warms; the first part also drops the user
        def warm(self, part):
            parts.append([m.text for m in part])
            if len(parts) == 1:  # as a forget would, from the loop, while this chunk is embedded
                asyncio.run_coroutine_threadsafe(users.drop("t", "kim"), loop)

        def close(self):
            pass

    class Retrieval:
        def for_user(self, storage):
            return Warms()

    users = OpenUsers(store, runtime, tmp_path, Retrieval(), lambda derived: None)
    texts = [{"role": "user", "text": f"note {n}"} for n in range(5)]
    store.add("t", "kim", Limits().check_messages(texts, "2025-01-01"))
    indexing = Indexing(store, runtime, users, retrieves=True)
    # with no lease, the unfinished claim is claimed again at once: by a new state, from the start
    assert runtime.run(indexing.pending(lease_s=0.0, chunk=2)) == 2
    assert parts == [["note 0", "note 1"], ["note 0", "note 1"], ["note 2", "note 3"], ["note 4"]]
    assert store.ready().backlog == 0
    runtime.close()
    store.close()


def test_added_messages_are_embedded_before_the_first_query_and_not_again(tmp_path, monkeypatch):
    from lazymem import Memory

    overrides = ["method=rag", "method.top_k=3", f"agent.dir={tmp_path / 'data'}", f"paths.cache={tmp_path}"]
    with Memory.from_config(overrides) as memory:
        encoded: list[str] = []
        encoder = memory.retriever.retrievers["dense"].encoder
        real_encode = encoder.encode
        monkeypatch.setattr(encoder, "encode", lambda texts: encoded.extend(texts) or real_encode(texts))

        def times(text: str) -> int:
            return sum(text in t for t in encoded)

        memory.add("kim", [{"role": "user", "text": f"note number {n}"} for n in range(40)])
        memory.add("kim", [{"role": "user", "text": "My bike is red."}])
        memory.add("lee", [{"role": "user", "text": "I ski in winter."}])
        assert memory.index_pending() == 2 and memory.index_pending() == 0
        assert (times("note number"), times("My bike is red."), times("I ski in winter.")) == (40, 1, 1)
        recall = memory.query("kim", "What colour is my bike?")
        assert "red" in recall.text
        assert (times("note number"), times("My bike is red.")) == (40, 1)  # nothing embedded again

        memory.add("kim", [{"role": "user", "text": "I sold the bike; now I walk."}])  # not indexed yet
        assert "walk" in memory.query("kim", "How do I get around now?").text
        assert times("now I walk") == 1 and times("note number") == 40
