"""Vector blocks: the codec, and the block-backed embedding cache (same behaviour as EmbeddingCache)."""

from __future__ import annotations

import struct

import numpy as np
import pytest

from lazymem.agent import vector_blocks
from lazymem.agent.local_blocks import LocalBlocks
from lazymem.agent.vector_blocks import (
    KIND,
    BlockEmbeddingCache,
    ModelMismatch,
    decode,
    decode_block,
    encode,
    without,
)
from lazymem.retrieval.embed_cache import EmbeddingCache


class FakeBlocks:
    """Blocks in a dict, recording reads and writes; `refuse` plays a generation that moved on."""

    def __init__(self):
        self.held: dict[tuple[str, str], dict[int, bytes]] = {}
        self.reads: list[tuple[str, set[int] | None]] = []
        self.writes: list[tuple[str, set[int]]] = []
        self.refuse = False
        self.closed = False

    def read(self, kind, name, numbers=None):
        self.reads.append((name, None if numbers is None else set(numbers)))
        held = self.held.get((kind, name), {})
        return dict(held) if numbers is None else {n: held[n] for n in numbers if n in held}

    def write(self, kind, name, blocks, replace=False):
        if self.refuse:
            return False
        held = {} if replace else dict(self.held.get((kind, name), {}))
        for number, data in blocks.items():
            if data is None:
                held.pop(number, None)
            else:
                held[number] = data
        self.held[(kind, name)] = held
        if not held:
            del self.held[(kind, name)]
        self.writes.append((name, set(blocks)))
        return True

    def names(self, kind):
        return sorted(name for k, name in self.held if k == kind)

    def last(self, kind, name):
        self.reads.append((name, "last"))
        held = self.held.get((kind, name), {})
        return (max(held), len(held[max(held)])) if held else None

    def close(self):
        self.closed = True

    def block_keys(self, name):
        return {n: decode(data)[0] for n, data in sorted(self.held.get((KIND, name), {}).items())}


def vec(seed: int, width: int = 4) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal(width).astype(np.float32)


def test_round_trip_reads_the_matrix_in_place():
    keys = ["a", "é-ü", "", "k" * 64]
    matrix = np.random.default_rng(0).standard_normal((4, 384)).astype(np.float32)
    data = encode(keys, matrix)
    got_keys, got = decode(data)
    assert got_keys == keys
    assert got.dtype == np.float32 and got.shape == (4, 384)
    np.testing.assert_array_equal(got, matrix)
    assert not got.flags.owndata and not got.flags.writeable  # a view of `data`, not a copy
    assert decode(encode([], np.zeros((0, 7), np.float32)))[0] == []


def test_decode_refuses_what_it_does_not_know():
    data = bytearray(encode(["a"], np.ones((1, 2), np.float32)))
    with pytest.raises(ValueError, match="version 9"):
        decode(bytes(data[:4]) + bytes([9]) + bytes(data[5:]))
    with pytest.raises(ValueError, match="bad magic"):
        decode(b"XXXX" + bytes(data[4:]))
    with pytest.raises(ValueError, match="header says"):
        decode(bytes(data[:-1]))
    with pytest.raises(ValueError, match="shorter than its header"):
        decode(b"LMVB")


def test_encode_refuses_bad_input():
    with pytest.raises(ValueError, match="2 keys"):
        encode(["a", "b"], np.ones((3, 2), np.float32))
    with pytest.raises(ValueError, match="NUL"):
        encode(["a\0b"], np.ones((1, 2), np.float32))


def test_without():
    matrix = np.arange(12, dtype=np.float32).reshape(3, 4)
    data = encode(["a", "b", "c"], matrix)
    assert without(data, {"x"}) is data
    assert without(data, {"a", "b", "c", "x"}) is None
    keys, rest = decode(without(data, {"b"}))
    assert keys == ["a", "c"]
    np.testing.assert_array_equal(rest, matrix[[0, 2]])


@pytest.fixture(params=["file", "blocks", "local"])
def reopen(request, tmp_path):
    """A function opening the same user's cache again: today's file, or blocks of 3 rows (in memory, or in
    the embedded store's SQLite file)."""
    if request.param == "file":
        return lambda: EmbeddingCache(tmp_path)
    if request.param == "local":
        return lambda: BlockEmbeddingCache(LocalBlocks(tmp_path / "blocks.sqlite"), block_size=3)
    blocks = FakeBlocks()
    return lambda: BlockEmbeddingCache(blocks, block_size=3)


def test_same_behaviour_as_the_embedding_cache(reopen):
    cache = reopen()
    cache.put("m1", {f"k{i}": vec(i) for i in range(5)})
    cache.put("m2", {"k0": vec(100, 2)})
    cache.put("m1", {"k0": vec(99), "k5": vec(5)})  # k0 is kept as first stored
    got = cache.get("m1", ["k0", "k5", "k9", "k0"])
    assert set(got) == {"k0", "k5"}
    np.testing.assert_array_equal(got["k0"], vec(0))
    assert (cache.hits, cache.misses) == (2, 1)
    cache.close()

    cache = reopen()
    assert set(cache.get("m1", [f"k{i}" for i in range(7)])) == {f"k{i}" for i in range(6)}
    cache.keep_only({"m1": {"k1", "k4"}})  # m2 goes entirely
    assert set(cache.get("m1", [f"k{i}" for i in range(7)])) == {"k0", "k2", "k3", "k5"}
    assert cache.get("m2", ["k0"]) == {}
    cache.keep_only({})
    assert cache.get("m1", ["k0"]) == {}
    cache.close()


def test_put_fills_the_last_block_then_starts_new_ones():
    blocks = FakeBlocks()
    cache = BlockEmbeddingCache(blocks, block_size=4)
    cache.put("m", {f"a{i}": vec(i) for i in range(3)})
    cache.put("m", {f"b{i}": vec(10 + i) for i in range(3)})
    assert blocks.writes[-1] == ("m", {0, 1})
    assert blocks.block_keys("m") == {0: ["a0", "a1", "a2", "b0"], 1: ["b1", "b2"]}
    cache.put("m", {"b2": vec(0), "c0": vec(20)})  # b2 already stored: only c0 goes in
    assert blocks.writes[-1] == ("m", {1})  # the full block 0 is not rewritten
    assert blocks.block_keys("m")[1] == ["b1", "b2", "c0"]
    cache.put("m", {f"d{i}": vec(30 + i) for i in range(11)})
    assert [len(keys) for keys in blocks.block_keys("m").values()] == [4, 4, 4, 4, 2]
    fresh = BlockEmbeddingCache(blocks, block_size=4)
    got = fresh.get("m", ["a0", "b2", "c0", "d8"])
    np.testing.assert_array_equal(
        np.stack([got[k] for k in ["a0", "b2", "c0", "d8"]]), np.stack([vec(i) for i in (0, 12, 20, 38)])
    )


def test_get_reads_all_once_then_only_the_blocks_it_needs():
    blocks = FakeBlocks()
    BlockEmbeddingCache(blocks, block_size=2).put("m", {f"k{i}": vec(i) for i in range(6)})
    cache = BlockEmbeddingCache(blocks, block_size=2)
    blocks.reads.clear()
    assert len(cache.get("m", [f"k{i}" for i in range(6)])) == 6
    assert blocks.reads == [("m", None)]
    assert cache.get("m", ["new1", "new2"]) == {}
    assert blocks.reads == [("m", None), ("m", "last")]  # absent, and nothing written since: no block read
    np.testing.assert_array_equal(cache.get("m", ["k3", "k4"])["k3"], vec(3))
    assert blocks.reads[-1] == ("m", {1, 2})  # all known: not even `last`


def test_get_sees_what_another_writer_appended_since():
    """The indexer's cache, complete since its first build, and an import writing through caches of its
    own: the indexer finds the imported vectors instead of embedding them again."""
    blocks = FakeBlocks()
    indexer = BlockEmbeddingCache(blocks, block_size=3)
    indexer.put("m", {"a": vec(0)})
    assert indexer.get("m", ["a"]).keys() == {"a"}
    BlockEmbeddingCache(blocks, block_size=3).put("m", {"b": vec(1)})  # grows block 0
    BlockEmbeddingCache(blocks, block_size=3).put("m", {"c": vec(2), "d": vec(3)})  # and starts block 1
    got = indexer.get("m", ["a", "b", "d", "x"])
    assert got.keys() == {"a", "b", "d"}
    np.testing.assert_array_equal(got["d"], vec(3))
    blocks.reads.clear()
    assert indexer.get("m", ["x"]) == {} and blocks.reads == [("m", "last")]
    fresh_model = BlockEmbeddingCache(blocks)
    assert fresh_model.get("n", ["y"]) == {}  # no block of "n" yet
    BlockEmbeddingCache(blocks).put("n", {"y": vec(4)})
    assert fresh_model.get("n", ["y"]).keys() == {"y"}


def test_a_fresh_caches_put_reads_only_the_last_block():
    """An import opens a fresh cache per batch: its put must not read every block of the model."""
    blocks = FakeBlocks()
    BlockEmbeddingCache(blocks, block_size=2).put("m", {f"k{i}": vec(i) for i in range(5)})  # blocks 0-2
    blocks.reads.clear()
    BlockEmbeddingCache(blocks, block_size=2).put("m", {"new": vec(50)})
    assert blocks.reads == [("m", "last"), ("m", {2, 3})]  # the last block, and one more written meanwhile
    assert blocks.block_keys("m") == {0: ["k0", "k1"], 1: ["k2", "k3"], 2: ["k4", "new"]}
    blocks.reads.clear()
    BlockEmbeddingCache(blocks, block_size=2).put("other", {"x": vec(1)})  # a model without blocks
    assert blocks.reads == [("other", "last"), ("other", {0})]


def test_a_key_stored_twice_by_fresh_puts_is_read_once_and_dropped_everywhere():
    """A fresh put knows only the last block, so it stores again a key an earlier block holds: get answers
    with the first copy, and keep_only (through `without`) leaves no copy."""
    blocks = FakeBlocks()
    BlockEmbeddingCache(blocks, block_size=2).put("m", {"a": vec(0), "b": vec(1), "c": vec(2)})
    BlockEmbeddingCache(blocks, block_size=2).put("m", {"a": vec(9), "d": vec(3)})
    assert blocks.block_keys("m") == {0: ["a", "b"], 1: ["c", "a"], 2: ["d"]}
    fresh = BlockEmbeddingCache(blocks, block_size=2)
    got = fresh.get("m", ["a", "d"])
    np.testing.assert_array_equal(got["a"], vec(0))  # the first copy
    np.testing.assert_array_equal(fresh.get("m", ["a"])["a"], vec(0))  # and again from the key map
    fresh.put("m", {"a": vec(8)})  # complete now: known, not stored a third time
    assert sum(keys.count("a") for keys in blocks.block_keys("m").values()) == 2
    BlockEmbeddingCache(blocks).keep_only({"m": {"a"}})
    assert blocks.block_keys("m") == {0: ["b"], 1: ["c"], 2: ["d"]}
    assert BlockEmbeddingCache(blocks).get("m", ["a", "b"]).keys() == {"b"}
    both = encode(["a", "x", "a"], np.stack([vec(0), vec(1), vec(2)]))
    assert decode(without(both, {"a"}))[0] == ["x"]


def test_a_put_after_the_last_block_went_reads_the_model_afresh():
    blocks = FakeBlocks()
    cache = BlockEmbeddingCache(blocks, block_size=2)
    cache.put("m", {"a": vec(0), "b": vec(1), "c": vec(2)})
    BlockEmbeddingCache(blocks).keep_only({"m": {"c"}})  # block 1 deleted behind the cache's back
    cache.put("m", {"d": vec(3)})
    assert blocks.block_keys("m") == {0: ["a", "b"], 1: ["d"]}


def test_a_refused_write_stores_nothing():
    blocks = FakeBlocks()
    cache = BlockEmbeddingCache(blocks)
    cache.put("m", {"a": vec(0)})
    blocks.refuse = True
    cache.put("m", {"b": vec(1)})
    assert cache.dropped == 1
    assert cache.get("m", ["a", "b"]).keys() == {"a"}  # not pretending b was stored
    blocks.refuse = False
    assert BlockEmbeddingCache(blocks).get("m", ["b"]) == {}
    cache.put("m", {"b": vec(1)})  # b is not taken for stored: the next put stores it
    np.testing.assert_array_equal(BlockEmbeddingCache(blocks).get("m", ["b"])["b"], vec(1))


def test_two_writers_keep_both_and_store_nothing_twice():
    blocks = FakeBlocks()
    one, two = BlockEmbeddingCache(blocks, block_size=2), BlockEmbeddingCache(blocks, block_size=2)
    one.put("m", {"a": vec(0)})
    two.get("m", ["a"])
    one.put("m", {"b": vec(1), "c": vec(2)})  # fills block 0, starts block 1 behind two's back
    two.put("m", {"c": vec(9), "d": vec(3)})
    assert blocks.block_keys("m") == {0: ["a", "b"], 1: ["c", "d"]}


def test_a_get_after_a_rewrite_elsewhere_finds_the_moved_rows():
    blocks = FakeBlocks()
    cache = BlockEmbeddingCache(blocks, block_size=4)
    cache.put("m", {k: vec(i) for i, k in enumerate("abcd")})
    assert len(cache.get("m", list("abcd"))) == 4
    BlockEmbeddingCache(blocks).keep_only({"m": {"a"}})  # c moves from row 2 to row 1
    got = cache.get("m", ["a", "c"])
    assert got.keys() == {"c"}
    np.testing.assert_array_equal(got["c"], vec(2))


def test_keep_only_rewrites_only_the_blocks_holding_the_keys():
    blocks = FakeBlocks()
    cache = BlockEmbeddingCache(blocks, block_size=2)
    cache.put("m", {f"k{i}": vec(i) for i in range(6)})
    blocks.writes.clear()
    cache.keep_only({"m": {"k2", "k3", "k4"}})
    assert blocks.writes == [("m", {1, 2})]
    assert blocks.block_keys("m") == {0: ["k0", "k1"], 2: ["k5"]}


def test_width_mismatch_and_close():
    blocks = FakeBlocks()
    cache = BlockEmbeddingCache(blocks)
    cache.put("m", {"a": vec(0, 4)})
    with pytest.raises(ValueError, match="width 3, but the stored ones have 4"):
        cache.put("m", {"b": vec(1, 3)})
    cache.close()
    assert blocks.closed
    with pytest.raises(ValueError, match="block_size"):
        BlockEmbeddingCache(blocks, block_size=0)


def test_struct_header_is_24_bytes_so_the_matrix_is_aligned():
    data = encode(["a"], np.ones((1, 1), np.float32))
    assert struct.unpack_from("<4sB", data) == (b"LMVB", 1)
    assert len(data) == 24 + 4 + 1


def recorded_model(data: bytes) -> str | None:
    """The model a block records (None: version 1)."""
    return decode_block(data)[2]


def test_version_2_records_the_model_and_version_1_stays_readable():
    matrix = np.stack([vec(0), vec(1)])
    data = encode(["a", "b"], matrix, "model-A|max_len=None")
    assert struct.unpack_from("<4sB", data) == (b"LMVB", 2)
    keys, got, recorded = decode_block(data)
    assert (keys, recorded) == (["a", "b"], "model-A|max_len=None")
    np.testing.assert_array_equal(got, matrix)
    assert recorded == "model-A|max_len=None" and decode(data, "model-A|max_len=None")[0] == keys
    assert decode(data)[0] == keys  # read without a name: no check
    old = encode(["a", "b"], matrix)  # as blocks were written before (their name is their only record)
    assert decode_block(old)[2] is None and decode(old, "anything")[0] == ["a", "b"]
    # a deletion keeps the record; the header's sizes cover it
    assert recorded_model(without(data, {"a"})) == "model-A|max_len=None"
    assert recorded_model(without(old, {"a"})) is None
    with pytest.raises(ValueError, match="header says"):
        decode(data[:-1])


def test_a_block_of_model_a_read_as_model_b_is_refused():
    data = encode(["a"], vec(0)[None], "model-A")
    with pytest.raises(ModelMismatch, match="records the model 'model-A'") as caught:
        decode(data, "model-B")
    assert (caught.value.read_as, caught.value.recorded) == ("model-B", "model-A")


def test_the_cache_treats_another_models_block_as_absent_and_says_so_once(caplog, monkeypatch):
    """A's vectors stored under B's name (a copy, a bug): never returned for B, embedded again, logged."""
    monkeypatch.setattr(vector_blocks, "_WARNED", set())
    blocks = FakeBlocks()
    BlockEmbeddingCache(blocks, block_size=2).put("A", {"a": vec(0), "b": vec(1), "c": vec(2)})
    assert {recorded_model(d) for d in blocks.held[(KIND, "A")].values()} == {"A"}
    blocks.held[(KIND, "B")] = dict(blocks.held[(KIND, "A")])  # blocks 0 and 1, recording A
    cache = BlockEmbeddingCache(blocks, block_size=2)
    with caplog.at_level("WARNING", logger="lazymem.agent.vector_blocks"):
        assert cache.get("B", ["a", "b", "c"]) == {}
        assert cache.missing("B", ["a", "c"]) == {"a", "c"}
        assert BlockEmbeddingCache(blocks).get("B", ["a"]) == {}
    assert cache.foreign == 2
    assert len([r for r in caplog.records if "records the model 'A'" in r.getMessage()]) == 1
    cache.put("B", {"a": vec(10)})  # appended after the foreign blocks, never into one of them
    assert blocks.block_keys("B")[2] == ["a"] and recorded_model(blocks.held[(KIND, "B")][2]) == "B"
    np.testing.assert_array_equal(BlockEmbeddingCache(blocks).get("B", ["a"])["a"], vec(10))
    assert BlockEmbeddingCache(blocks).get("A", ["a"]).keys() == {"a"}  # A's own blocks read as ever
    # a fresh cache's put (it reads only the last block, which is A's) starts a block of its own too
    blocks.held[(KIND, "C")] = {0: blocks.held[(KIND, "A")][1]}
    BlockEmbeddingCache(blocks, block_size=2).put("C", {"z": vec(3)})
    assert blocks.block_keys("C") == {0: ["c"], 1: ["z"]}
    assert BlockEmbeddingCache(blocks).get("C", ["c", "z"]).keys() == {"z"}


def test_missing_and_drop_models():
    blocks = FakeBlocks()
    cache = BlockEmbeddingCache(blocks, block_size=2)
    cache.put("new", {"a": vec(0), "b": vec(1), "c": vec(2)})
    BlockEmbeddingCache(blocks).put("old", {"a": vec(5)})
    assert cache.models() == ["new", "old"]
    assert cache.missing("new", ["a", "b", "c", "d"]) == {"d"}
    BlockEmbeddingCache(blocks).put("new", {"d": vec(3)})  # another writer: seen through the last block
    assert cache.missing("new", ["a", "d"]) == set()
    assert cache.drop_models(["old"]) and cache.models() == ["new"]
    blocks.refuse = True  # the user's generation moved on: nothing is deleted, and the caller is told
    assert not cache.drop_models(["new"]) and cache.models() == ["new"]
