"""A user's derived data as rows of the server database (lazymem/agent/derived_rows.py): the embedding and
response caches over them, bound to the user's generation, and the move of vectors stored one per row (a
database from before the blocks) into blocks."""

from __future__ import annotations

import threading
from pathlib import Path

import numpy as np
import psycopg

from lazymem.agent.derived_rows import move_legacy_vectors
from lazymem.agent.postgres_store import PostgresStore
from lazymem.agent.store import NewMessage
from lazymem.agent.vector_blocks import KIND, decode, encode


def new(*texts: str) -> list[NewMessage]:
    return [NewMessage("user", t, "2025-01-01", "s1") for t in texts]


def _vec(x: float) -> np.ndarray:
    return np.array([x, x], dtype=np.float32)


def _scratch() -> Path:
    return Path("/nonexistent-scratch")  # the built-in derived data never touches the scratch folder


def test_derived_rows_follow_the_generation(pg_dsn):
    store = PostgresStore(pg_dsn, pool_size=2)
    store.add("t", "u", new("my cat is Tom"))
    generation = store.snapshot("t", "u").generation
    derived = store.derived("t", "u", _scratch(), generation)
    cache = derived.storage.embedding_cache()
    cache.put("enc", {"k1": _vec(1.0)})
    assert cache.get("enc", ["k1", "k2"])["k1"].tolist() == [1.0, 1.0]
    replies = derived.llm_cache()
    replies.put("q", {"text": "Tom"})
    assert replies.get("q") == {"text": "Tom"}

    store.add("t", "u", new("and a dog"))  # an add keeps the generation: derived data stays valid
    assert store.snapshot("t", "u").generation == generation
    store.forget("t", "u", [1])
    assert cache.get("enc", ["k1"]) == {} and replies.get("q") is None  # gone with the messages
    cache.put("enc", {"k1": _vec(2.0)})  # a query that began before the forget writes nothing after it
    assert cache.get("enc", ["k1"]) == {} and derived.storage.rows.dropped == 1
    store.close()


def test_blocks_rows_follow_the_generation(pg_dsn):
    store = PostgresStore(pg_dsn, pool_size=2)
    store.add("t", "u", new("my cat is Tom", "and a dog"))
    store.add("t", "other", new("not u's"))
    generation = store.snapshot("t", "u").generation
    blocks = store.derived("t", "u", _scratch(), generation).storage.blocks()
    assert blocks.read("bm25", "state") == {} and blocks.names("bm25") == []
    assert blocks.write("bm25", "state", {0: b"zero", 1: b"one", 2: b"two"}) is True
    assert blocks.write("bm25", "other-name", {0: b"x"})
    assert blocks.read("bm25", "state", [2, 0, 9]) == {0: b"zero", 2: b"two"}
    assert blocks.write("bm25", "state", {1: None, 2: b"TWO"})
    assert blocks.read("bm25", "state") == {0: b"zero", 2: b"TWO"}
    assert blocks.write("bm25", "state", {5: b"five"}, replace=True)
    assert blocks.read("bm25", "state") == {5: b"five"} and blocks.names("bm25") == ["other-name", "state"]
    others = store.derived("t", "other", _scratch(), store.snapshot("t", "other").generation).storage
    assert others.blocks().read("bm25", "state") == {}  # per user

    store.forget("t", "u", [1])  # a new generation: what this view writes now is dropped
    assert blocks.write("bm25", "state", {6: b"six"}) is False and blocks.rows.dropped == 1
    assert blocks.read("bm25", "state") == {}  # the deletion took the user's blocks
    fresh = store.derived("t", "u", _scratch(), store.snapshot("t", "u").generation).storage.blocks()
    assert fresh.write("bm25", "state", {0: b"new"}) and fresh.read("bm25", "state") == {0: b"new"}
    store.close()


def _legacy_rows(dsn: str, user: str, model: str, vectors: dict[str, bytes]) -> None:
    """Vectors as a database from before the blocks kept them: one `derived` row per key."""
    with psycopg.connect(dsn) as conn:
        conn.cursor().executemany(
            "INSERT INTO derived (tenant, user_id, kind, model, key, value, created) "
            "VALUES ('t', %s, 'embedding', %s, %s, %s, 0)",
            [(user, model, key, value) for key, value in vectors.items()],
        )


def _count(dsn: str, sql: str, *args) -> int:
    with psycopg.connect(dsn) as conn:
        return conn.execute(sql, args).fetchone()[0]


def test_legacy_vector_rows_move_into_blocks_after_the_last_one(pg_dsn):
    store = PostgresStore(pg_dsn, pool_size=2)
    store.add("t", "u", new("a"))
    store.add("t", "v", new("b"))
    storage = store.derived("t", "u", _scratch(), store.snapshot("t", "u").generation).storage
    assert storage.blocks().write(KIND, "enc", {0: encode(["new"], np.ones((1, 2), np.float32))})
    old = {f"k{i}": _vec(float(i)).tobytes() for i in range(5)}
    _legacy_rows(pg_dsn, "u", "enc", {**old, "torn": b"abc", "wide": np.ones(3, np.float32).tobytes()})
    _legacy_rows(pg_dsn, "u", "other", {"x": _vec(9.0).tobytes()})
    _legacy_rows(pg_dsn, "v", "enc", {"not-u": _vec(1.0).tobytes()})

    assert move_legacy_vectors(storage.rows, block_size=2) == 6  # the torn and the wide row are left out
    blocks = storage.blocks()
    assert {n: decode(data)[0] for n, data in blocks.read(KIND, "enc").items()} == {
        0: ["new"],
        1: ["k0", "k1"],
        2: ["k2", "k3"],
        3: ["k4"],
    }
    assert blocks.names(KIND) == ["enc", "other"]
    assert blocks.last(KIND, "enc") == (3, len(blocks.read(KIND, "enc")[3]))
    assert blocks.last(KIND, "x") is None
    sql = "SELECT COUNT(*) FROM derived WHERE user_id = %s AND kind = 'embedding'"
    assert _count(pg_dsn, sql, "u") == 0 and _count(pg_dsn, sql, "v") == 1  # every row of u's, none of v's
    assert move_legacy_vectors(storage.rows) == 0  # nothing left: nothing moves
    got = storage.embedding_cache().get("enc", ["k4", "new", "torn"])
    assert got.keys() == {"k4", "new"} and got["k4"].tolist() == [4.0, 4.0]
    store.close()


def test_legacy_rows_stay_when_the_generation_moved_on(pg_dsn):
    store = PostgresStore(pg_dsn, pool_size=2)
    store.add("t", "u", new("a", "b"))
    stale = store.derived("t", "u", _scratch(), store.snapshot("t", "u").generation).storage
    store.forget("t", "u", [1])
    _legacy_rows(pg_dsn, "u", "enc", {"k": _vec(1.0).tobytes()})
    assert move_legacy_vectors(stale.rows) is None
    assert stale.blocks().read(KIND, "enc") == {}
    assert _count(pg_dsn, "SELECT COUNT(*) FROM derived WHERE kind = 'embedding'") == 1
    store.close()


def test_replicas_moving_one_user_at_once_move_each_vector_once(pg_dsn):
    store = PostgresStore(pg_dsn, pool_size=4)
    store.add("t", "u", new("a"))
    generation = store.snapshot("t", "u").generation
    _legacy_rows(pg_dsn, "u", "enc", {f"k{i}": _vec(float(i)).tobytes() for i in range(3000)})
    moved, errors = [], []

    def mover() -> None:
        try:
            moved.append(
                move_legacy_vectors(store.derived("t", "u", _scratch(), generation).storage.rows, 500)
            )
        except BaseException as e:  # noqa: BLE001 - reported by the assertion below
            errors.append(e)

    threads = [threading.Thread(target=mover) for _ in range(3)]
    [t.start() for t in threads]
    [t.join() for t in threads]
    assert errors == [] and sum(moved) == 3000
    blocks = store.derived("t", "u", _scratch(), generation).storage.blocks()
    keys = [key for data in blocks.read(KIND, "enc").values() for key in decode(data)[0]]
    assert len(keys) == len(set(keys)) == 3000
    store.close()


def test_a_postgres_store_from_before_the_blocks_is_moved_and_not_embedded_again(
    tmp_path, pg_dsn, monkeypatch
):
    """A user indexed by today's schema (vectors as `derived` rows, no blocks): the first query moves the
    rows into blocks, deletes them, and encodes only the question."""
    from lazymem import Memory

    texts = ["My bike is red.", "My locker code is 4711.", "I ski in winter."]
    store = ["agent/store=postgres", f"agent.store.dsn={pg_dsn}"]
    overrides = ["method=rag", "method.top_k=2", f"agent.dir={tmp_path / 'data'}", f"paths.cache={tmp_path}"]
    with Memory.from_config([*overrides, *store]) as memory:
        memory.add("kim", [{"role": "user", "text": t} for t in texts])
        assert memory.index_pending() == 1
    with psycopg.connect(pg_dsn) as conn:  # back to the schema before the blocks: vectors as rows
        rows = conn.execute(
            "SELECT tenant, user_id, name, data FROM blocks WHERE kind = %s", (KIND,)
        ).fetchall()
        assert len(rows) == 1
        tenant, user, model, data = rows[0]
        keys, matrix = decode(bytes(data))
        conn.cursor().executemany(
            "INSERT INTO derived (tenant, user_id, kind, model, key, value, created) "
            "VALUES (%s, %s, 'embedding', %s, %s, %s, 0)",
            [(tenant, user, model, key, vector.tobytes()) for key, vector in zip(keys, matrix, strict=True)],
        )
        conn.execute("DELETE FROM blocks")

    with Memory.from_config([*overrides, *store]) as memory:
        encoded: list[str] = []
        encoder = memory.retriever.retrievers["dense"].encoder
        real_encode = encoder.encode
        monkeypatch.setattr(encoder, "encode", lambda batch: encoded.extend(batch) or real_encode(batch))
        assert "red" in memory.query("kim", "What colour is my bike?").text
        assert encoded == ["What colour is my bike?"]  # no message text encoded again
    assert _count(pg_dsn, "SELECT COUNT(*) FROM derived WHERE kind = 'embedding'") == 0
    assert _count(pg_dsn, "SELECT COUNT(*) FROM blocks WHERE kind = %s", KIND) == 1
