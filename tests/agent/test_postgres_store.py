"""The PostgreSQL store (lazymem/agent/postgres_store.py) on a real, throwaway PostgreSQL cluster."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import numpy as np
import psycopg
import pytest

from lazymem.agent.postgres_store import VERSION, PostgresStore
from lazymem.agent.store import NewMessage, UnknownMessages


def new(*texts: str, source: str | None = None) -> list[NewMessage]:
    return [NewMessage("user", t, "2025-01-01", "s1", source) for t in texts]


@pytest.fixture
def store(pg_dsn):
    s = PostgresStore(pg_dsn, pool_size=4)
    yield s
    s.close()


def test_ids_are_per_tenant_and_forget_renews_the_generation(store):
    a = store.add("acme", "u", new("a1", "a2"))
    b = store.add("other", "u", new("b1"))
    assert a == [1, 2] and b == [1]  # another tenant's volume is not visible in the gaps
    assert store.add("acme", "v", new("a3")) == [3]
    snap = store.snapshot("acme", "u")
    assert [m.text for m in snap.messages] == ["a1", "a2"] and snap.generation is not None
    with pytest.raises(UnknownMessages):
        store.forget("acme", "u", [1, 3])  # 3 is user v's: nothing deleted
    assert len(store.snapshot("acme", "u").messages) == 2
    assert store.forget("acme", "u", [1]) == 1
    after = store.snapshot("acme", "u")
    assert [m.id for m in after.messages] == [2] and after.generation != snap.generation
    assert store.forget("acme", "u") == 1
    assert store.snapshot("acme", "u").generation is None
    assert store.generations([("acme", "u"), ("acme", "v")]) == {
        ("acme", "v"): store.snapshot("acme", "v").generation
    }


def test_a_source_already_stored_is_not_stored_again(store):
    first = store.add("t", "u", [*new("ok", source="f:1"), *new("ok", source="f:2")])
    again = store.add("t", "u", [*new("ok", source="f:2"), *new("fine", source="f:3")])
    assert again[0] == first[1]
    assert [m.text for m in store.snapshot("t", "u").messages] == ["ok", "ok", "fine"]
    twice = store.add("t", "u", [*new("again", source="f:9"), *new("again", source="f:9")])
    assert twice[0] == twice[1] and len(store.snapshot("t", "u").messages) == 4


def test_concurrent_imports_of_one_source_by_two_replicas_store_each_line_once(store, pg_dsn):
    """Two replicas resuming the same import at once: the tenant's id row serialises their batches, so the
    second sees the first's sources instead of hitting the unique index."""
    other = PostgresStore(pg_dsn, pool_size=4)
    errors: list[BaseException] = []

    def importer(s: PostgresStore) -> None:
        try:
            for b in range(10):
                s.add("t", "u", [NewMessage("user", "ok", "t", "s", f"f:{b * 20 + i}") for i in range(20)])
        except BaseException as e:  # noqa: BLE001 - reported by the assertion below
            errors.append(e)

    threads = [threading.Thread(target=importer, args=(s,)) for s in (store, other, store, other)]
    [t.start() for t in threads]
    [t.join() for t in threads]
    other.close()
    assert errors == []
    messages = store.snapshot("t", "u").messages
    assert len(messages) == 200 and len({m.id for m in messages}) == 200


def test_purge_deletes_by_age_and_one_process_at_a_time(store, pg_dsn):
    store.add("t", "old", new("x"))
    store.add("t", "mixed", new("y"))
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute("UPDATE messages SET added = added - 1000 WHERE text IN ('x', 'y')")
    store.add("t", "mixed", new("z"))
    with psycopg.connect(pg_dsn) as holder:  # another replica in the middle of a purge
        holder.execute("SELECT pg_advisory_xact_lock(72002)")
        assert store.purge("t", before=_now() - 500) is None
    assert store.purge("t", before=_now() - 500) == {"mixed": 1, "old": 1}
    assert [m.text for m in store.snapshot("t", "mixed").messages] == ["z"]
    assert store.snapshot("t", "old").generation is None


def test_schema_is_versioned_and_created_once_by_concurrent_replicas(pg_dsn):
    stores, errors = [], []

    def start():
        try:
            stores.append(PostgresStore(pg_dsn, pool_size=1))
        except Exception as e:  # noqa: BLE001
            errors.append(e)

    threads = [threading.Thread(target=start) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors and len(stores) == 4
    with psycopg.connect(pg_dsn) as conn:
        assert conn.execute("SELECT version FROM schema_version").fetchall() == [(VERSION,)]
        conn.execute("UPDATE schema_version SET version = %s", (VERSION + 1,))
    for s in stores:
        s.close()
    with pytest.raises(RuntimeError, match="schema version"):
        PostgresStore(pg_dsn, pool_size=1)


def test_maintenance_leaves_no_forgotten_text_in_the_table_files(store, postgres, pg_dsn):
    canary = "canary-7f3a9c-in-the-table-files"
    store.add("t", "u", new(canary, "kept"))
    store.derived("t", "u", _scratch(), store.snapshot("t", "u").generation).llm_cache().put(
        "k", {"c": canary}
    )
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute("CHECKPOINT")
    assert postgres.files_containing(canary.encode())  # the search does see table files
    store.forget("t", "u", [1])
    with psycopg.connect(pg_dsn) as conn:
        assert not conn.execute("SELECT 1 FROM messages WHERE text LIKE %s", (f"%{canary}%",)).fetchall()
        assert conn.execute("SELECT COUNT(*) FROM derived").fetchone() == (0,)
    store.maintain()
    assert postgres.files_containing(canary.encode()) == []
    assert [m.text for m in store.snapshot("t", "u").messages] == ["kept"]


def _scratch() -> Path:
    return Path("/nonexistent-scratch")  # the built-in derived data never touches the scratch folder


def _now() -> float:
    return time.time()


def test_pending_users_are_claimed_once_and_expired_claims_taken_over(store):
    store.add("t", "a", new("1"))
    store.add("t", "b", new("2"))
    first, second = store.claim_pending(lease_s=600), store.claim_pending(lease_s=600)
    assert {first.user, second.user} == {"a", "b"} and store.claim_pending(lease_s=600) is None
    store.add("t", "a", new("3"))  # added to while claimed: still pending after finish
    store.finish(first)
    store.finish(second)
    again = store.claim_pending(lease_s=0.2)  # claimed by a process that then dies
    assert again.user == "a" and store.claim_pending(lease_s=600) is None
    time.sleep(0.3)
    taken = store.claim_pending(lease_s=600)
    assert taken.user == "a" and taken.mark == again.mark
    store.finish(taken)
    assert store.claim_pending(lease_s=600) is None
    store.add("t", "gone", new("4"))
    store.forget("t", "gone")  # a forgotten user is not pending
    assert store.claim_pending(lease_s=600) is None


def _vectors(store: PostgresStore, user: str) -> dict[tuple[str, str], bytes]:
    with store.pool.connection() as conn:
        rows = conn.execute(
            "SELECT model, key, value FROM derived WHERE user_id = %s AND kind = 'embedding'", (user,)
        ).fetchall()
    return {(model, key): bytes(value) for model, key, value in rows}


def _keys_by_text(user: str, deleted) -> dict[str, set[str]]:
    return {"enc": {f"key-of-{m.text}" for m in deleted}}  # as Retriever.vector_keys names them


def test_a_partial_deletion_keeps_the_other_messages_vectors_and_drops_the_rest(store, pg_dsn):
    store.add("t", "u", new("a", "b", "c"))
    derived = store.derived("t", "u", _scratch(), store.snapshot("t", "u").generation)
    cache = derived.storage.embedding_cache()
    cache.put("enc", {f"key-of-{t}": np.full(4, i, dtype=np.float32) for i, t in enumerate("abc")})
    cache.put("old-encoder", {"key-of-c": np.zeros(4, dtype=np.float32)})
    derived.llm_cache().put("window", {"reply": "KEEP a"})
    seen = []

    def keys(user, deleted):
        seen.append((user, [m.text for m in deleted]))
        return _keys_by_text(user, deleted)

    assert store.forget("t", "u", [1], vector_keys=keys) == 1
    assert seen == [("u", ["a"])]
    assert set(_vectors(store, "u")) == {("enc", "key-of-b"), ("enc", "key-of-c")}
    with psycopg.connect(pg_dsn) as conn:  # the memory model's replies may quote any message: all go
        assert conn.execute("SELECT COUNT(*) FROM derived WHERE kind <> 'embedding'").fetchone() == (0,)
    # a new generation reads the kept vectors
    after = store.derived("t", "u", _scratch(), store.snapshot("t", "u").generation)
    assert set(after.storage.embedding_cache().get("enc", ["key-of-b", "key-of-a"])) == {"key-of-b"}

    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute("UPDATE messages SET added = added - 1000 WHERE text = 'b'")
    assert store.purge("t", before=_now() - 500, vector_keys=_keys_by_text) == {"u": 1}
    assert set(_vectors(store, "u")) == {("enc", "key-of-c")}
    assert store.forget("t", "u", [3], vector_keys=_keys_by_text) == 1  # the last message: all goes
    assert _vectors(store, "u") == {}
    store.add("t", "v", new("d"))
    cache = store.derived("t", "v", _scratch(), store.snapshot("t", "v").generation).storage.embedding_cache()
    cache.put("enc", {"key-of-d": np.ones(4, dtype=np.float32)})
    store.add("t", "v", new("e"))
    assert store.forget("t", "v", [5]) == 1  # no vector_keys: every derived row goes
    assert _vectors(store, "v") == {}
