"""A user's derived data as rows of the server database (lazymem/agent/derived_rows.py): the embedding and
response caches and the blocks over them, bound to the user's generation."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from lazymem.agent.postgres_store import PostgresStore
from lazymem.agent.store import NewMessage


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
    assert blocks.last("bm25", "state") == (5, len(b"five")) and blocks.last("bm25", "absent") is None
    others = store.derived("t", "other", _scratch(), store.snapshot("t", "other").generation).storage
    assert others.blocks().read("bm25", "state") == {}  # per user

    store.forget("t", "u", [1])  # a new generation: what this view writes now is dropped
    assert blocks.write("bm25", "state", {6: b"six"}) is False and blocks.rows.dropped == 1
    assert blocks.read("bm25", "state") == {}  # the deletion took the user's blocks
    fresh = store.derived("t", "u", _scratch(), store.snapshot("t", "u").generation).storage.blocks()
    assert fresh.write("bm25", "state", {0: b"new"}) and fresh.read("bm25", "state") == {0: b"new"}
    store.close()
