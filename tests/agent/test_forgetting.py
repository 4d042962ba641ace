"""Deleting messages with what was derived from them (lazymem/agent/forgetting.py): a forget closes the
user's state and takes exactly the forgotten messages' vectors, on both stores; a purge drops the users who
lost a message and only those."""

from __future__ import annotations

import time

import pytest

from lazymem.agent.errors import UnknownUser
from lazymem.agent.forgetting import Forgetting
from lazymem.agent.inputs import Limits
from lazymem.agent.open_users import OpenUsers
from lazymem.agent.runtime import Runtime
from lazymem.agent.sqlite_store import SQLiteStore
from lazymem.agent.user_state import as_message


@pytest.fixture
def forgetting(tmp_path):
    """Forgetting over a SQLite store, without retrieval."""
    store, runtime = SQLiteStore(tmp_path), Runtime()
    users = OpenUsers(store, runtime, tmp_path, None, lambda derived: None)
    yield Forgetting(store, runtime, users, None)
    users.close()
    runtime.close()
    store.close()


def add(forgetting: Forgetting, user: str, *texts: str) -> list[int]:
    batch = Limits().check_messages([{"role": "user", "text": t} for t in texts], "2025-01-01")
    return forgetting.store.add("t", user, batch).ids


def test_a_forget_closes_the_users_state_and_folder_and_no_ids_change_nothing(forgetting):
    run, users = forgetting.runtime.run, forgetting.users
    ids = add(forgetting, "kim", "a", "b")
    run(users.read("t", "kim"))
    users.folder("t", "kim").mkdir(parents=True)
    assert run(forgetting.forget("t", "kim", [])) == 0  # nothing deleted, nothing dropped
    assert users.recency() == [("t", "kim")] and users.folder("t", "kim").exists()
    assert run(forgetting.forget("t", "kim", [ids[0]])) == 1
    assert users.recency() == [] and not users.folder("t", "kim").exists()
    assert run(forgetting.forget("t", "kim", None)) == 1
    with pytest.raises(UnknownUser):  # a user without messages, whatever the ids
        run(forgetting.forget("t", "kim", []))


def test_a_purge_drops_only_the_users_who_lost_a_message(forgetting):
    run, users = forgetting.runtime.run, forgetting.users
    add(forgetting, "old", "a")
    cutoff = forgetting.store.snapshot("t", "old").messages[0].added + 0.01
    time.sleep(0.05)
    add(forgetting, "new", "b")
    for user in ("old", "new"):
        run(users.read("t", user))
    counts = run(forgetting.purge("t", cutoff))
    assert counts == {"old": 1} and users.recency() == [("t", "new")]


@pytest.mark.parametrize("kind", ["sqlite", "postgres"])
def test_a_partial_forget_drops_the_forgotten_messages_vectors_and_keeps_the_rest(
    kind, tmp_path, monkeypatch, request
):
    """The keys the real dense retriever names for a deleted message are the ones its indexer stored:
    exactly those vectors go, and the next query embeds nothing again."""
    from lazymem import Memory

    store = ["agent/store=postgres", f"agent.store.dsn={request.getfixturevalue('pg_dsn')}"]
    overrides = ["method=rag", f"agent.dir={tmp_path / 'data'}", f"paths.cache={tmp_path}"]
    with Memory.from_config([*overrides, *(store if kind == "postgres" else [])]) as memory:
        encoded: list[str] = []
        encoder = memory.retriever.retrievers["dense"].encoder
        real_encode = encoder.encode
        monkeypatch.setattr(encoder, "encode", lambda texts: encoded.extend(texts) or real_encode(texts))

        def with_vectors(messages) -> list[str]:
            """The texts of those stored messages whose vectors kim's derived data holds."""
            generation = memory.store.generations([("default", "kim")])[("default", "kim")]
            cache = memory.open_users.derived("default", "kim", generation).storage.embedding_cache()
            try:
                keys = [memory.user_retrieval.vector_keys([as_message(0, m)]) for m in messages]
                held = [
                    all(len(cache.get(model, sorted(k))) == len(k) for model, k in ks.items()) for ks in keys
                ]
            finally:
                cache.close()
            return [m.text for m, h in zip(messages, held, strict=True) if h]

        texts = ["My bike is red.", "My locker code is 4711.", "I ski in winter."]
        ids = memory.add("kim", [{"role": "user", "text": t} for t in texts])
        memory.index_pending()
        stored = memory.store.snapshot("default", "kim").messages
        assert with_vectors(stored) == texts and len(encoded) == 3
        memory.forget("kim", [ids[1]])
        assert with_vectors(stored) == [texts[0], texts[2]]
        assert "red" in memory.query("kim", "What colour is my bike?").text
        assert not any("My bike" in t or "I ski" in t for t in encoded[3:])  # nothing embedded again
