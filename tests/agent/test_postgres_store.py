"""The PostgreSQL store (lazymem/agent/postgres_store.py) on a real, throwaway PostgreSQL cluster: among the
rest, two adds of one idempotency key at once, the migration of databases of earlier schema versions,
blocks deleted and rewritten with the messages, and a statement past wait_s. The pool's own faults
(dropped connections, an outage) are tests/agent/test_postgres_pool.py's."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import numpy as np
import psycopg
import pytest

from lazymem.agent import vector_blocks
from lazymem.agent.errors import StoreUnavailable
from lazymem.agent.postgres_store import PostgresStore
from lazymem.agent.schema import VERSION
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
        storage = (
            "SELECT attstorage FROM pg_attribute WHERE attrelid = 'blocks'::regclass AND attname = 'data'"
        )
        assert conn.execute(storage).fetchone() == ("e",)  # out of line, never compressed
        conn.execute("UPDATE schema_version SET version = %s", (VERSION + 1,))
    for s in stores:
        s.close()
    with pytest.raises(RuntimeError, match="schema version"):
        PostgresStore(pg_dsn, pool_size=1)


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


def _vectors(store: PostgresStore, user: str) -> set[tuple[str, str]]:
    """The user's vectors by (model, key): in vector blocks, or in `derived` rows as before the blocks."""
    with store.pool.pool.connection() as conn:
        rows = conn.execute(
            "SELECT model, key FROM derived WHERE user_id = %s AND kind = 'embedding'", (user,)
        ).fetchall()
        blocks = conn.execute(
            "SELECT name, data FROM blocks WHERE user_id = %s AND kind = %s", (user, vector_blocks.KIND)
        ).fetchall()
    return {*rows, *((name, key) for name, data in blocks for key in vector_blocks.decode(bytes(data))[0])}


def _put_vectors(store: PostgresStore, user: str, model: str, vectors: dict) -> None:
    """Store vectors as the user's embedding cache does (blocks)."""
    derived = store.derived("t", user, _scratch(), store.snapshot("t", user).generation)
    derived.storage.embedding_cache().put(model, vectors)


def _keys_by_text(user: str, deleted) -> dict[str, set[str]]:
    return {"enc": {f"key-of-{m.text}" for m in deleted}}  # as Retriever.vector_keys names them


def test_a_partial_deletion_keeps_the_other_messages_vectors_and_drops_the_rest(store, pg_dsn):
    store.add("t", "u", new("a", "b", "c"))
    derived = store.derived("t", "u", _scratch(), store.snapshot("t", "u").generation)
    vectors = {f"key-of-{t}": np.full(4, i, dtype=np.float32) for i, t in enumerate("abc")}
    _put_vectors(store, "u", "enc", vectors)
    _put_vectors(store, "u", "old-encoder", {"key-of-c": np.zeros(4, dtype=np.float32)})
    derived.llm_cache().put("window", {"reply": "KEEP a"})
    seen = []

    def keys(user, deleted):
        seen.append((user, [m.text for m in deleted]))
        return _keys_by_text(user, deleted)

    assert store.forget("t", "u", [1], vector_keys=keys) == 1
    assert seen == [("u", ["a"])]
    assert _vectors(store, "u") == {("enc", "key-of-b"), ("enc", "key-of-c")}
    with psycopg.connect(pg_dsn) as conn:  # the memory model's replies may quote any message: all go
        assert conn.execute("SELECT COUNT(*) FROM derived WHERE kind <> 'embedding'").fetchone() == (0,)
    # a new generation reads the kept vectors
    after = store.derived("t", "u", _scratch(), store.snapshot("t", "u").generation)
    assert set(after.storage.embedding_cache().get("enc", ["key-of-b", "key-of-a"])) == {"key-of-b"}

    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute("UPDATE messages SET added = added - 1000 WHERE text = 'b'")
    assert store.purge("t", before=_now() - 500, vector_keys=_keys_by_text) == {"u": 1}
    assert _vectors(store, "u") == {("enc", "key-of-c")}
    assert store.forget("t", "u", [3], vector_keys=_keys_by_text) == 1  # the last message: all goes
    assert _vectors(store, "u") == set()
    store.add("t", "v", new("d"))
    _put_vectors(store, "v", "enc", {"key-of-d": np.ones(4, dtype=np.float32)})
    store.add("t", "v", new("e"))
    assert store.forget("t", "v", [5]) == 1  # no vector_keys: every derived row goes
    assert _vectors(store, "v") == set()


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


# A database of schema version 2 (the first 11 statements), and what version 3 added, as lazymem wrote them
OLD_SCHEMA = [
    """CREATE TABLE messages (
        tenant TEXT NOT NULL, user_id TEXT NOT NULL, id BIGINT NOT NULL, session_id TEXT NOT NULL,
        time TEXT NOT NULL, role TEXT NOT NULL, text TEXT NOT NULL, added DOUBLE PRECISION NOT NULL,
        source TEXT, PRIMARY KEY (tenant, id)
    )""",
    "CREATE INDEX messages_by_user ON messages (tenant, user_id, id)",
    "CREATE UNIQUE INDEX messages_by_source ON messages (tenant, user_id, source) WHERE source IS NOT NULL",
    "CREATE TABLE tenant_ids (tenant TEXT PRIMARY KEY, last_id BIGINT NOT NULL)",
    "CREATE SEQUENCE generation_seq",
    "CREATE TABLE generations (tenant TEXT, user_id TEXT, generation BIGINT NOT NULL, "
    "PRIMARY KEY (tenant, user_id))",
    """CREATE TABLE derived (
        tenant TEXT NOT NULL, user_id TEXT NOT NULL, kind TEXT NOT NULL, model TEXT NOT NULL,
        key TEXT NOT NULL, value BYTEA NOT NULL, created DOUBLE PRECISION NOT NULL,
        PRIMARY KEY (tenant, user_id, kind, model, key)
    )""",
    "CREATE SEQUENCE pending_seq",
    "CREATE TABLE pending (tenant TEXT, user_id TEXT, mark BIGINT NOT NULL, "
    "claimed_until DOUBLE PRECISION NOT NULL DEFAULT 0, PRIMARY KEY (tenant, user_id))",
    "CREATE TABLE maintenance (pending BOOLEAN NOT NULL)",
    "INSERT INTO maintenance VALUES (false)",
    """CREATE TABLE idempotency (
        tenant TEXT NOT NULL, user_id TEXT NOT NULL, key TEXT NOT NULL, digest TEXT NOT NULL,
        ids BIGINT[] NOT NULL, created DOUBLE PRECISION NOT NULL, PRIMARY KEY (tenant, user_id, key)
    )""",
    "CREATE INDEX idempotency_by_age ON idempotency (created)",
    "ALTER TABLE pending ADD COLUMN since DOUBLE PRECISION NOT NULL "
    "DEFAULT extract(epoch FROM clock_timestamp())",
    "ALTER TABLE pending ADD COLUMN claimed_at DOUBLE PRECISION",
]


@pytest.mark.parametrize("old", [2, 3])
def test_a_database_of_an_earlier_version_is_migrated_with_its_messages_ids_and_sources(pg_dsn, old):
    with psycopg.connect(pg_dsn) as conn:  # the old version's schema, and one add as that version wrote it
        for statement in OLD_SCHEMA[: 11 if old == 2 else None]:
            conn.execute(statement)
        conn.execute("CREATE TABLE schema_version (version INTEGER NOT NULL)")
        conn.execute("INSERT INTO schema_version VALUES (%s)", (old,))
        conn.execute("INSERT INTO tenant_ids VALUES ('t', 7)")
        conn.execute(
            "INSERT INTO messages (tenant, user_id, id, session_id, time, role, text, added, source) "
            "VALUES ('t', 'u', 7, 's1', '2025-01-01', 'user', 'from an old version', 100, 'f:1')"
        )
        conn.execute("INSERT INTO generations VALUES ('t', 'u', nextval('generation_seq'))")
        conn.execute("INSERT INTO pending (tenant, user_id, mark) VALUES ('t', 'u', nextval('pending_seq'))")

    store = PostgresStore(pg_dsn, pool_size=2)
    assert [(m.id, m.text) for m in store.snapshot("t", "u").messages] == [(7, "from an old version")]
    ready = store.ready()  # pending since the upgrade
    assert ready.backlog == 1 and ready.oldest_pending_s < 5
    assert store.add("t", "u", new("from an old version", source="f:1")) == Added([7], 0)
    renamed = NewMessage("user", "from an old version", "t", "s", "v2:1", ("f:1",))
    assert store.add("t", "u", [renamed]) == Added([7], 0)
    key = Idempotency("k", "d")
    added = store.add("t", "u", new("next"), key)
    assert added.stored == 1 and added.ids[0] > 7  # the tenant's counter goes on
    assert store.add("t", "u", new("next"), key) == Added(added.ids, 0, replayed=True)
    store.close()
    with psycopg.connect(pg_dsn) as conn:
        assert conn.execute("SELECT version FROM schema_version").fetchall() == [(VERSION,)] == [(5,)]
        assert conn.execute("SELECT COUNT(*) FROM blocks").fetchone() == (0,)


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
    with store.pool.pool.connection():  # the only connection is taken
        started = time.monotonic()
        with pytest.raises(StoreUnavailable, match="busy"):
            store.ready()
        assert time.monotonic() - started < 1.5
    store.close()


def _blocks(store: PostgresStore, user: str) -> dict[tuple[str, str, int], bytes]:
    with store.pool.pool.connection() as conn:
        rows = conn.execute(
            "SELECT kind, name, block, data FROM blocks WHERE user_id = %s", (user,)
        ).fetchall()
    return {(kind, name, block): bytes(data) for kind, name, block, data in rows}


def _vector_block(*texts: str) -> bytes:
    keys = [f"key-of-{t}" for t in texts]
    return vector_blocks.encode(keys, np.arange(len(keys) * 2, dtype=np.float32).reshape(-1, 2))


def test_a_deletion_rewrites_the_vector_blocks_and_drops_every_other_block(store):
    store.add("t", "u", new("a", "b", "c", "d"))
    blocks = store.derived("t", "u", _scratch(), store.snapshot("t", "u").generation).storage.blocks()
    kind = vector_blocks.KIND
    assert blocks.write(
        kind, "enc", {0: _vector_block("a", "b"), 1: _vector_block("c"), 2: _vector_block("d")}
    )
    assert blocks.write(kind, "old-encoder", {0: _vector_block("a")})
    assert blocks.write("bm25", "state", {0: b"term statistics of a b c d"})
    untouched = _blocks(store, "u")[(kind, "enc", 2)]

    assert store.forget("t", "u", [1, 3], vector_keys=_keys_by_text) == 2  # "a" and "c"
    after = _blocks(store, "u")
    assert set(after) == {(kind, "enc", 0), (kind, "enc", 2)}  # block 1 emptied, bm25 and old model gone
    assert vector_blocks.decode(after[(kind, "enc", 0)])[0] == ["key-of-b"]
    assert after[(kind, "enc", 2)] == untouched

    assert store.forget("t", "u", [2]) == 1  # no vector keys: every block goes
    assert _blocks(store, "u") == {}
    store.add("t", "v", new("e"))
    blocks = store.derived("t", "v", _scratch(), store.snapshot("t", "v").generation).storage.blocks()
    assert blocks.write(kind, "enc", {0: _vector_block("e")})
    store.forget("t", "v")  # forget-all
    assert _blocks(store, "v") == {}


def test_maintenance_leaves_no_forgotten_block_in_the_table_files(store, postgres, pg_dsn):
    canary = b"canary-block-5d1e-in-the-table-files"
    store.add("t", "u", new("a", "kept"))
    blocks = store.derived("t", "u", _scratch(), store.snapshot("t", "u").generation).storage.blocks()
    assert blocks.write("bm25", "state", {0: canary * 4})
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute("CHECKPOINT")
    assert postgres.files_containing(canary)
    store.forget("t", "u", [1], vector_keys=_keys_by_text)
    assert _blocks(store, "u") == {}
    store.maintain()
    assert postgres.files_containing(canary) == []
