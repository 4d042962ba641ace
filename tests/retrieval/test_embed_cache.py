"""The SQLite embedding cache: reuse across builds, survival of SIGKILL, two concurrent writers."""

import hashlib
import os
import signal
import sqlite3
import subprocess
import sys
import time

import numpy as np
import pytest

from lazymem.data.schema import History, Message
from lazymem.retrieval.dense import DenseRetriever
from lazymem.retrieval.embed_cache import EmbeddingCache, text_key
from lazymem.retrieval.hybrid import HybridRetriever

DIM = 16


def fake_vector(text: str) -> np.ndarray:
    seed = int.from_bytes(hashlib.sha256(text.encode()).digest()[:4], "little")
    v = np.random.default_rng(seed).standard_normal(DIM).astype(np.float32)
    return v / np.linalg.norm(v)


class CountingEncoder:
    """Stands in for the bi-encoder: deterministic vectors, and a count of texts it was asked to encode."""

    def __init__(self, identity="fake-model"):
        self.identity = identity
        self.encoded = 0

    width = DIM

    def encode(self, texts):
        self.encoded += len(texts)
        return np.stack([fake_vector(t) for t in texts])


class FolderStorage:
    """A user's storage as the agent gives it (lazymem.retrieval.per_user.UserStorage), vectors only."""

    def __init__(self, dir):
        self.dir = dir

    def embedding_cache(self):
        return EmbeddingCache(self.dir)


def history(n=30, hid="h"):
    return History(
        hid,
        [Message(i, "s", "2023/01/01", "user", f"message number {i} about topic {i % 7}") for i in range(n)],
    )


def integrity(path) -> str:
    with sqlite3.connect(path) as conn:
        return conn.execute("PRAGMA integrity_check").fetchone()[0]


def test_second_build_embeds_nothing(tmp_path):
    enc = CountingEncoder()
    first = HybridRetriever({"dense": DenseRetriever(enc, EmbeddingCache(tmp_path), commit_every=8)})
    assert first.index(history()).embedded == 30
    assert enc.encoded == 30

    # A fresh retriever (as in a new run) over the same cache directory: every vector is a hit.
    enc2, cache2 = CountingEncoder(), EmbeddingCache(tmp_path)
    second = HybridRetriever({"dense": DenseRetriever(enc2, cache2)})
    index = second.index(history())
    assert index.embedded == 0 and enc2.encoded == 0
    assert (cache2.hits, cache2.misses) == (30, 0)
    np.testing.assert_allclose(
        index.indexes["dense"].matrix[3], fake_vector("message number 3 about topic 3")
    )


def test_cache_key_is_model_identity_and_exact_text(tmp_path):
    msgs = history(10).messages
    DenseRetriever(CountingEncoder("model-a"), EmbeddingCache(tmp_path)).build(msgs)
    other_model = CountingEncoder("model-b")
    DenseRetriever(other_model, EmbeddingCache(tmp_path)).build(msgs)
    assert other_model.encoded == 10
    other_text = CountingEncoder("model-a")
    DenseRetriever(other_text, EmbeddingCache(tmp_path), template="{role}: {text}").build(msgs)
    assert other_text.encoded == 10
    assert EmbeddingCache(tmp_path).count() == 30


def test_duplicate_texts_are_encoded_once(tmp_path):
    enc = CountingEncoder()
    msgs = [Message(i, "s", "t", "user", "same words") for i in range(5)]
    index = DenseRetriever(enc, EmbeddingCache(tmp_path)).build(msgs)
    assert enc.encoded == 1 and index.matrix.shape == (5, DIM)


def test_cache_get_put_roundtrip_and_counters(tmp_path):
    cache = EmbeddingCache(tmp_path)
    vec = np.arange(4, dtype=np.float32)
    cache.put("m", {text_key("a"): vec})
    cache.put("m", {text_key("a"): vec + 1})  # an existing row is kept, not overwritten
    got = cache.get("m", [text_key("a"), text_key("b")])
    np.testing.assert_array_equal(got[text_key("a")], vec)
    assert (cache.hits, cache.misses) == (1, 1)


_KILLED_CHILD = r"""
import sys, time, hashlib
import numpy as np
from lazymem.data.schema import Message
from lazymem.retrieval.dense import DenseRetriever
from lazymem.retrieval.embed_cache import EmbeddingCache

class SlowEncoder:
    identity = "fake-model"
    def encode(self, texts):
        time.sleep(0.05)
        out = []
        for t in texts:
            seed = int.from_bytes(hashlib.sha256(t.encode()).digest()[:4], "little")
            v = np.random.default_rng(seed).standard_normal(16).astype(np.float32)
            out.append(v / np.linalg.norm(v))
        return np.stack(out)

msgs = [Message(i, "s", "2023/01/01", "user", f"message number {i} about topic {i % 7}") for i in range(400)]
DenseRetriever(SlowEncoder(), EmbeddingCache(sys.argv[1]), commit_every=10).build(msgs)
print("finished", flush=True)
"""


def test_sigkill_mid_run_leaves_a_readable_cache_with_whole_batches(tmp_path):
    proc = subprocess.Popen([sys.executable, "-c", _KILLED_CHILD, str(tmp_path)])
    probe = EmbeddingCache(tmp_path)
    deadline = time.monotonic() + 60
    try:
        while time.monotonic() < deadline:
            if probe.path.exists() and probe.count() >= 50:
                break
            time.sleep(0.02)
        os.kill(proc.pid, signal.SIGKILL)
    finally:
        proc.wait(timeout=30)
    assert proc.returncode == -signal.SIGKILL
    probe.close()

    assert integrity(probe.path) == "ok"
    done = EmbeddingCache(tmp_path).count()
    assert 50 <= done < 400 and done % 10 == 0  # only whole committed batches

    # Resuming embeds exactly what the killed run had not finished, and the vectors are right.
    enc = CountingEncoder()
    index = DenseRetriever(enc, EmbeddingCache(tmp_path)).build(history(400).messages)
    assert enc.encoded == 400 - done
    np.testing.assert_allclose(index.matrix[0], fake_vector("message number 0 about topic 0"))


_WRITER_CHILD = r"""
import sys, hashlib
import numpy as np
from lazymem.retrieval.embed_cache import EmbeddingCache, text_key

import os, time
cache = EmbeddingCache(sys.argv[1])
lo, hi = int(sys.argv[2]), int(sys.argv[3])
go = os.path.join(sys.argv[1], "go")
while not os.path.exists(go):  # start together, so the two really write at the same time
    time.sleep(0.005)
for start in range(lo, hi, 10):
    items = {}
    for i in range(start, min(start + 10, hi)):
        seed = int.from_bytes(hashlib.sha256(str(i).encode()).digest()[:4], "little")
        items[text_key(str(i))] = np.random.default_rng(seed).standard_normal(16).astype(np.float32)
    cache.put("m", items)
    cache.get("m", list(items))  # readers interleave with the other writer
"""


def test_two_writers_do_not_corrupt_the_cache(tmp_path):
    EmbeddingCache(tmp_path).count()  # create the file, so both children open an existing database
    procs = [
        subprocess.Popen([sys.executable, "-c", _WRITER_CHILD, str(tmp_path), lo, hi])
        for lo, hi in (("0", "1500"), ("750", "2250"))
    ]  # 750 keys written by both
    time.sleep(0.5)  # let both children import and open the database
    (tmp_path / "go").touch()
    for p in procs:
        assert p.wait(timeout=120) == 0

    cache = EmbeddingCache(tmp_path)
    assert integrity(cache.path) == "ok"
    assert cache.count("m") == 2250
    got = cache.get("m", [text_key(str(i)) for i in (0, 900, 2249)])
    for i in (0, 900, 2249):
        seed = int.from_bytes(hashlib.sha256(str(i).encode()).digest()[:4], "little")
        expected = np.random.default_rng(seed).standard_normal(16).astype(np.float32)
        np.testing.assert_array_equal(got[text_key(str(i))], expected)


def test_cache_is_picklable_and_reopens(tmp_path):
    import pickle

    cache = EmbeddingCache(tmp_path)
    cache.put("m", {"k": np.ones(3, np.float32)})
    clone = pickle.loads(pickle.dumps(cache))
    assert clone.count() == 1


def test_one_cache_serves_several_threads(tmp_path):
    """The agent service indexes in a worker thread and scores windows on its event loop's thread."""
    from concurrent.futures import ThreadPoolExecutor

    cache = EmbeddingCache(tmp_path)
    with ThreadPoolExecutor(1) as worker:
        worker.submit(cache.put, "m", {"k": np.ones(3, np.float32)}).result()  # the connection opens there
    assert set(cache.get("m", ["k", "absent"])) == {"k"}  # ...and is used here

    def writer(i):
        cache.put("m", {f"t{i}-{j}": np.full(3, j, np.float32) for j in range(20)})
        return len(cache.get("m", [f"t{i}-{j}" for j in range(20)]))

    with ThreadPoolExecutor(8) as pool:
        assert list(pool.map(writer, range(16))) == [20] * 16
    assert cache.count("m") == 1 + 16 * 20


@pytest.mark.parametrize("n", [0, 1])
def test_tiny_histories(tmp_path, n):
    index = DenseRetriever(CountingEncoder(), EmbeddingCache(tmp_path)).build(history(n).messages)
    assert len(index.search("topic")) == n


def test_dense_vector_keys_name_what_its_user_form_stored(tmp_path):
    messages = history(3).messages
    dense = DenseRetriever(CountingEncoder(), EmbeddingCache(tmp_path / "shared"), template="{role}: {text}")
    mine = dense.for_user(FolderStorage(tmp_path / "alice"))
    mine.warm(messages)
    keys = dense.vector_keys(messages[:1])
    assert set(keys) == {"fake-model"} and len(keys["fake-model"]) == 1
    assert set(mine.cache.get("fake-model", list(keys["fake-model"]))) == keys["fake-model"]
    mine.close()
    assert DenseRetriever(CountingEncoder(), None).vector_keys(messages) == {}  # it stores nothing
    by_position = DenseRetriever(CountingEncoder(), EmbeddingCache(tmp_path / "p"), template="{idx} {text}")
    assert by_position.vector_keys(messages) is None  # positions move when a message is deleted


def test_the_vector_width_is_asked_of_the_retriever_that_stores_the_model(tmp_path):
    a = DenseRetriever(CountingEncoder("model-a"), EmbeddingCache(tmp_path))
    b = DenseRetriever(CountingEncoder("model-b"), None)  # no cache: it stores no vector
    assert (a.vector_width("model-a"), a.vector_width("model-b"), b.vector_width("model-b")) == (
        DIM,
        None,
        None,
    )
