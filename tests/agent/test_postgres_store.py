"""The PostgreSQL store (lazymem/agent/postgres_store.py) on a real, throwaway PostgreSQL cluster: among the
rest, two adds of one idempotency key at once, the migration of a version-1 database, and the database's
faults (connections it dropped, a statement past wait_s, an outage and the restart after it)."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import numpy as np
import psycopg
import pytest

from lazymem.agent.errors import StoreUnavailable
from lazymem.agent.postgres_store import MIGRATIONS, VERSION, PostgresStore
from lazymem.agent.store import Added, Idempotency, NewMessage, Readiness, UnknownMessages


def new(*texts: str, source: str | None = None) -> list[NewMessage]:
    return [NewMessage("user", t, "2025-01-01", "s1", source) for t in texts]


@pytest.fixture
def store(pg_dsn):
    s = PostgresStore(pg_dsn, pool_size=4)
    yield s
    s.close()


def test_ids_are_per_tenant_and_forget_renews_the_generation(store):
    a = store.add("acme", "u", new("a1", "a2")).ids
    b = store.add("other", "u", new("b1")).ids
    assert a == [1, 2] and b == [1]  # another tenant's volume is not visible in the gaps
    assert store.add("acme", "v", new("a3")).ids == [3]
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
    first = store.add("t", "u", [*new("ok", source="f:1"), *new("ok", source="f:2")]).ids
    again = store.add("t", "u", [*new("ok", source="f:2"), *new("fine", source="f:3")])
    assert again.ids[0] == first[1] and again.stored == again.skipped == 1
    assert [m.text for m in store.snapshot("t", "u").messages] == ["ok", "ok", "fine"]
    twice = store.add("t", "u", [*new("again", source="f:9"), *new("again", source="f:9")])
    assert twice.ids[0] == twice.ids[1] and twice.stored == 1 and len(store.snapshot("t", "u").messages) == 4


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


def _wait_until(condition, timeout_s: float = 10.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.02)


def _lock_waits(dsn: str) -> int:
    with psycopg.connect(dsn) as conn:
        return conn.execute(
            "SELECT COUNT(*) FROM pg_stat_activity "
            "WHERE datname = current_database() AND wait_event_type = 'Lock'"
        ).fetchone()[0]


def test_a_second_add_of_a_key_waits_for_the_first_and_replays_its_ids(store, pg_dsn):
    """Two threads (as two replicas would) add with one key at once: the second waits for the first to
    commit, then replays its ids; the batch is stored once."""
    store.add("t", "other", new("x"))  # the tenant's id row exists
    key, results = Idempotency("k", "d"), {}

    def add(name: str) -> None:
        try:
            results[name] = store.add("t", "u", new("a", "b"), key)
        except BaseException as e:  # noqa: BLE001 - the assertion below shows it
            results[name] = e

    threads = {name: threading.Thread(target=add, args=(name,)) for name in ("first", "second")}
    with psycopg.connect(pg_dsn) as holder:  # holds the first add open once it has taken the key
        holder.execute("SELECT * FROM tenant_ids WHERE tenant = 't' FOR UPDATE")
        threads["first"].start()
        _wait_until(lambda: _lock_waits(pg_dsn) == 1)
        threads["second"].start()
        _wait_until(lambda: _lock_waits(pg_dsn) == 2)
    for thread in threads.values():
        thread.join(10)
    assert results["first"] == Added([2, 3], 2)
    assert results["second"] == Added([2, 3], 0, replayed=True)
    assert [m.text for m in store.snapshot("t", "u").messages] == ["a", "b"]


def test_a_version_1_database_is_migrated_with_its_messages_ids_and_sources(pg_dsn):
    with psycopg.connect(pg_dsn) as conn:  # version 1's schema, and one add as that version wrote it
        for statement in MIGRATIONS[0]:
            conn.execute(statement)
        conn.execute("CREATE TABLE schema_version (version INTEGER NOT NULL)")
        conn.execute("INSERT INTO schema_version VALUES (1)")
        conn.execute("INSERT INTO tenant_ids VALUES ('t', 7)")
        conn.execute(
            "INSERT INTO messages (tenant, user_id, id, session_id, time, role, text, added, source) "
            "VALUES ('t', 'u', 7, 's1', '2025-01-01', 'user', 'from version 1', 100, 'f:1')"
        )
        conn.execute("INSERT INTO generations VALUES ('t', 'u', nextval('generation_seq'))")
        conn.execute("INSERT INTO pending (tenant, user_id, mark) VALUES ('t', 'u', nextval('pending_seq'))")

    store = PostgresStore(pg_dsn, pool_size=2)
    assert [(m.id, m.text) for m in store.snapshot("t", "u").messages] == [(7, "from version 1")]
    ready = store.ready()  # pending since the upgrade
    assert ready.backlog == 1 and ready.oldest_pending_s < 5
    assert store.add("t", "u", new("from version 1", source="f:1")) == Added([7], 0)
    renamed = NewMessage("user", "from version 1", "t", "s", "v2:1", ("f:1",))
    assert store.add("t", "u", [renamed]) == Added([7], 0)
    key = Idempotency("k", "d")
    added = store.add("t", "u", new("next"), key)
    assert added.stored == 1 and added.ids[0] > 7  # the tenant's counter goes on
    assert store.add("t", "u", new("next"), key) == Added(added.ids, 0, replayed=True)
    store.close()
    with psycopg.connect(pg_dsn) as conn:
        assert conn.execute("SELECT version FROM schema_version").fetchall() == [(VERSION,)] == [(2,)]


def test_pooled_connections_the_server_dropped_are_replaced_without_an_error(store, pg_dsn):
    held = [store.pool.getconn() for _ in range(4)]  # four connections wait in the pool
    for conn in held:
        store.pool.putconn(conn)
    with psycopg.connect(pg_dsn, autocommit=True) as admin:
        others = "FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid()"
        assert admin.execute(f"SELECT COUNT(pg_terminate_backend(pid)) {others}").fetchone() == (4,)
        _wait_until(lambda: admin.execute(f"SELECT COUNT(*) {others}").fetchone() == (0,))
    started = time.monotonic()
    assert store.add("t", "u", new("after")).stored == 1
    assert [m.text for m in store.snapshot("t", "u").messages] == ["after"]
    assert time.monotonic() - started < 1


def test_a_call_that_waits_past_wait_s_is_store_unavailable(pg_dsn):
    store = PostgresStore(pg_dsn, pool_size=2, wait_s=1)
    store.add("t", "u", new("x"))
    with psycopg.connect(pg_dsn) as holder:
        holder.execute("SELECT * FROM tenant_ids FOR UPDATE")  # a transaction that holds on
        started = time.monotonic()
        with pytest.raises(StoreUnavailable, match="statement timeout"):
            store.add("t", "u", new("y"))
        assert time.monotonic() - started < 2
        holder.execute("SELECT * FROM generations FOR UPDATE")
        started = time.monotonic()
        with pytest.raises(StoreUnavailable, match="lock timeout"):  # a deletion waits no longer either
            store.forget("t", "u")
        assert time.monotonic() - started < 2
    assert store.add("t", "u", new("y")).stored == 1  # the connections are fine
    assert [m.text for m in store.snapshot("t", "u").messages] == ["x", "y"]
    store.close()


def test_ready_answers_within_a_second_whatever_wait_s(pg_dsn):
    store = PostgresStore(pg_dsn, pool_size=1, wait_s=5)
    assert store.ready() == Readiness(0, None, None)
    with store.pool.connection():  # the only connection is taken
        started = time.monotonic()
        with pytest.raises(StoreUnavailable, match="busy"):
            store.ready()
        assert time.monotonic() - started < 1.5
    store.close()


def test_an_outage_is_store_unavailable_and_adds_succeed_soon_after_the_restart(own_postgres):
    # trust authentication ignores the password: it is there to be kept out of the errors
    dsn = own_postgres.new_database().replace("lazymem@", "lazymem:pw-s3cret@")
    store = PostgresStore(dsn, pool_size=4, wait_s=2)
    store.add("t", "u", new("before"))
    own_postgres.stop()
    for call in (lambda: store.add("t", "u", new("during")), lambda: store.snapshot("t", "u")):
        started = time.monotonic()
        with pytest.raises(StoreUnavailable) as caught:
            call()
        assert time.monotonic() - started < 2 + 1
        reason = str(caught.value)
        assert "no connection within 2s" in reason and "refused" in reason and "s3cret" not in reason
        assert "\n" not in reason and caught.value.retry_after_s > 0
    started = time.monotonic()
    with pytest.raises(StoreUnavailable, match="no connection within 1s"):  # a store started now
        PostgresStore(dsn, wait_s=1)
    assert time.monotonic() - started < 2
    # an outage of some 15 s: long enough for psycopg_pool's default back-off (tries 1, 2, 4, 8, 16 s
    # apart for 5 minutes) to leave the next try over 10 s after the restart
    time.sleep(10)
    own_postgres.start(init=False)
    restarted = time.monotonic()
    while True:
        try:
            store.add("t", "u", new("after"))
            break
        except StoreUnavailable:
            assert time.monotonic() - restarted < 10
            time.sleep(0.1)
    print(f"first add {time.monotonic() - restarted:.2f}s after the restart")
    assert [m.text for m in store.snapshot("t", "u").messages] == ["before", "after"]
    store.close()
