"""The agent's retrieval per user (lazymem/agent/user_retrieval.py): entries with the per-user port get a form
of their own per user and an index grown after an add; an entry with only the research hooks is served,
rebuilt whenever the user's messages change, with one warning naming it; the user's folder storage."""

from __future__ import annotations

import hashlib
import logging

import numpy as np
import pytest

from lazymem.agent.user_retrieval import LocalUserStorage, UserHybrid, UserRetrieval
from lazymem.data.schema import History, Message
from lazymem.retrieval.base import Ranking, Retriever
from lazymem.retrieval.dense import DenseRetriever
from lazymem.retrieval.embed_cache import EmbeddingCache
from lazymem.retrieval.hybrid import HybridRetriever

from helpers import EXTENSION

DIM = 8
TEXTS = ["I moved to Porto.", "Porto is lovely.", "I lead the data migration.", "It finished early."]
WARNING = (
    "retrieval.retrievers.{} has only the research hooks (build, problems, gpu_keys): "
    "served without incremental updates"
)


class HashEncoder:
    """Deterministic unit vectors per text (no model load), counting what it encodes."""

    identity = "hash-encoder"
    width = DIM

    def __init__(self):
        self.encoded = 0

    def encode(self, texts):
        self.encoded += len(texts)
        out = []
        for t in texts:
            seed = int.from_bytes(hashlib.sha256(t.encode()).digest()[:4], "little")
            v = np.random.default_rng(seed).standard_normal(DIM).astype(np.float32)
            out.append(v / np.linalg.norm(v))
        return np.stack(out)


class LatestIndex:
    embedded = 0

    def __init__(self, size: int):
        self.size = size

    def search(self, query, k=None):
        return Ranking((self.size - 1,), (1.0,))


class Latest(Retriever):
    """Only the research hooks: ranks the most recent message alone, and counts its builds."""

    def __init__(self):
        self.builds = 0

    def build(self, messages):
        self.builds += 1
        return LatestIndex(len(messages))


def messages(texts=TEXTS, start=0):
    return [Message(start + i, "s1", "2025-01-01", "user", t) for i, t in enumerate(texts)]


def shared(tmp_path, **entries):
    dense = DenseRetriever(HashEncoder(), EmbeddingCache(tmp_path / "shared"))
    return HybridRetriever({"dense": dense, **entries}, n=10)


def test_an_entry_without_the_port_is_served_and_named_in_one_warning(tmp_path, caplog):
    with caplog.at_level(logging.WARNING, logger="lazymem.agent.user_retrieval"):
        retrieval = UserRetrieval(shared(tmp_path, latest=Latest()))
    assert [r.getMessage() for r in caplog.records] == [WARNING.format("latest")]
    assert list(retrieval.ports) == ["dense"]
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="lazymem.agent.user_retrieval"):
        UserRetrieval(shared(tmp_path))
    assert caplog.records == []  # every entry has the port: nothing to say


def test_each_user_gets_the_ports_own_form_and_the_other_entries_as_they_are(tmp_path):
    latest = Latest()
    retrieval = UserRetrieval(shared(tmp_path, latest=latest))
    alice = retrieval.for_user(LocalUserStorage(tmp_path / "alice"))
    assert isinstance(alice.hybrid, UserHybrid) and alice.hybrid.max_cached_indexes == 1
    assert alice.hybrid.retrievers["latest"] is latest  # nothing of it is kept per user
    # what methods embed with: the user's vector blocks
    assert alice.hybrid.dense().cache.blocks.path == tmp_path / "alice" / "blocks.sqlite"
    assert (alice.hybrid.fusion, alice.hybrid.reranker) == (
        retrieval.shared.fusion,
        retrieval.shared.reranker,
    )
    assert alice.warm(messages()) == len(TEXTS) and alice.warm(messages()) == 0
    alice.close()


def test_a_history_that_extends_the_last_one_grows_the_port_entries_and_rebuilds_the_others(tmp_path):
    latest = Latest()
    user = UserRetrieval(shared(tmp_path, latest=latest)).for_user(LocalUserStorage(tmp_path / "u"))
    first = messages(TEXTS[:2])
    before = user.hybrid.index(History("user", first))
    grown = user.hybrid.index(History("user", [*first, *messages(TEXTS[2:], start=2)]))
    assert grown.indexes["dense"].embedded == 2  # only the new messages' vectors were read or encoded
    np.testing.assert_array_equal(grown.indexes["dense"].matrix[:2], before.indexes["dense"].matrix)
    assert latest.builds == 2 and grown.search("migration").ranked["latest"] == (3,)  # it saw the add
    scratch = UserRetrieval(shared(tmp_path / "b")).for_user(LocalUserStorage(tmp_path / "v"))
    expected = scratch.hybrid.index(History("user", messages()))
    np.testing.assert_allclose(grown.indexes["dense"].matrix, expected.indexes["dense"].matrix)
    assert user.forms["dense"].cache.hits == 0  # growing read no earlier vector back
    # the same texts in new objects (a reread after a deletion) prove nothing: built from scratch
    again = user.hybrid.index(History("user", messages([*TEXTS, "one more"])))
    assert again.indexes["dense"].embedded == 1 and again.indexes["dense"].matrix.shape == (5, DIM)
    assert user.forms["dense"].cache.hits == 4  # every earlier vector was read back from the user's cache
    user.close()


def test_the_same_message_objects_reuse_the_index_and_hash_nothing(tmp_path, monkeypatch):
    import lazymem.retrieval.hybrid as hybrid

    monkeypatch.setattr(hybrid, "fingerprint", lambda history: pytest.fail("hashed the history"))
    latest = Latest()
    user = UserRetrieval(shared(tmp_path, latest=latest)).for_user(LocalUserStorage(tmp_path / "u"))
    held = messages()
    first = user.hybrid.index(History("user", held[:]))  # the agent passes a copy of the list it holds
    assert user.hybrid.index(History("user", held[:])) is first and latest.builds == 1
    copies = [Message(m.idx, m.session_id, m.time, m.role, m.text) for m in held]
    assert user.hybrid.index(History("user", copies)) is not first and latest.builds == 2
    user.close()


def test_vector_keys_merge_the_ports_by_model_and_none_wins(tmp_path):
    plain = DenseRetriever(HashEncoder(), EmbeddingCache(tmp_path), template="{text}")
    with_role = DenseRetriever(HashEncoder(), EmbeddingCache(tmp_path), template="{role}: {text}")
    by_position = DenseRetriever(HashEncoder(), EmbeddingCache(tmp_path), template="{idx}: {text}")
    two = messages(TEXTS[:2])
    merged = UserRetrieval(HybridRetriever({"a": plain, "b": with_role, "l": Latest()})).vector_keys(two)
    assert set(merged) == {"hash-encoder"} and len(merged["hash-encoder"]) == 4  # Latest adds nothing
    assert UserRetrieval(HybridRetriever({"a": plain, "c": by_position})).vector_keys(two) is None
    assert UserRetrieval(HybridRetriever({"l": Latest()})).vector_keys(two) == {}


def test_the_vector_width_comes_from_the_port_that_stores_the_model(tmp_path):
    stores = DenseRetriever(HashEncoder(), EmbeddingCache(tmp_path))
    stores_none = DenseRetriever(HashEncoder(), None)  # no cache: it stores no vector
    retrieval = UserRetrieval(HybridRetriever({"l": Latest(), "n": stores_none, "s": stores}))
    assert [retrieval.vector_width(m) for m in ("hash-encoder", "other")] == [DIM, None]


def test_local_storage_keeps_the_vectors_in_blocks_in_the_users_folder(tmp_path):
    storage = LocalUserStorage(tmp_path / "users" / "alice")
    cache = storage.embedding_cache()
    cache.put("model-a", {"k": np.array([1.0, 0.0], dtype=np.float32)})
    cache.close()
    again = LocalUserStorage(tmp_path / "users" / "alice").embedding_cache()
    assert [p.name for p in (tmp_path / "users" / "alice").iterdir()] == ["blocks.sqlite"]
    assert again.blocks.names("vectors") == ["model-a"]
    assert again.get("model-a", ["k"])["k"].tolist() == [1.0, 0.0]
    again.close()
    other = LocalUserStorage(tmp_path / "users" / "bob").embedding_cache()
    assert other.get("model-a", ["k"]) == {}  # another user's folder, another cache
    other.close()
    with pytest.raises(AttributeError):
        storage.dir = tmp_path / "other"  # frozen: a storage names one user for good


def test_local_blocks_are_a_file_of_the_users_folder(tmp_path):
    pytest.importorskip("lazymem.agent.local_blocks")
    blocks = LocalUserStorage(tmp_path / "alice").blocks()
    assert blocks.write("bm25", "m", {0: b"zero", 1: b"one"}) is True
    assert blocks.read("bm25", "m") == {0: b"zero", 1: b"one"}
    assert (tmp_path / "alice" / "blocks.sqlite").is_file()


def test_keep_vectors_keeps_only_the_remaining_messages_vectors_and_no_other_file(tmp_path):
    storage = LocalUserStorage(tmp_path / "alice")
    cache = storage.embedding_cache()
    gone = np.full(8, 7.25, dtype=np.float32)  # a byte pattern to look for in the files afterwards
    cache.put("enc", {"kept": np.ones(8, dtype=np.float32), "gone": gone})
    cache.put("old-encoder", {"kept": np.zeros(8, dtype=np.float32)})
    cache.close()
    bm25 = b"bm25-state-of-the-forgotten-text" * 4
    assert storage.blocks().write("bm25", "lucene-x", {0: bm25})
    (tmp_path / "alice" / "llm.sqlite").write_bytes(b"a reply about the forgotten text")
    (tmp_path / "alice" / "bm25").mkdir()
    (tmp_path / "alice" / "bm25" / "index").write_text("terms")

    storage.keep_vectors({"enc": {"gone"}})

    assert sorted(p.name for p in (tmp_path / "alice").iterdir()) == ["blocks.sqlite"]
    assert storage.blocks().read("bm25", "lucene-x") == {}  # every other kind of block goes
    again = storage.embedding_cache()
    assert set(again.get("enc", ["kept", "gone"])) == {"kept"}
    assert again.get("old-encoder", ["kept"]) == {}  # a model the retrievers no longer name cannot be trimmed
    assert again.blocks.names("vectors") == ["enc"]
    again.close()
    data = (tmp_path / "alice" / "blocks.sqlite").read_bytes()
    assert gone.tobytes() not in data and bm25 not in data


def test_a_memory_serves_a_retriever_with_only_the_research_hooks(tmp_path, monkeypatch, toy_modules, caplog):
    """The toy recency retriever (build only) beside the bundled dense one: its list is the most recent
    message (fusion depth 1), so what the memory returns shows it sees an add and forgets a deletion."""
    from lazymem import Memory

    monkeypatch.syspath_prepend(str(EXTENSION))
    overrides = [
        "method=rag",
        "method.top_k=2",
        "retrieval.retrievers.bm25=null",
        "+retrieval.retrievers.recency._target_=toy_retriever.RecencyRetriever",
        "+retrieval.fusion.depth.recency=1",
        f"agent.dir={tmp_path / 'data'}",
        f"paths.cache={tmp_path / 'cache'}",
    ]
    with caplog.at_level(logging.WARNING, logger="lazymem.agent.user_retrieval"):
        memory = Memory.from_config(overrides)
    with memory:
        assert [r.getMessage() for r in caplog.records] == [WARNING.format("recency")]
        memory.add(
            "kim", [{"role": "user", "text": "My bike is red."}, {"role": "user", "text": "I like tea."}]
        )

        def shown(question="What colour is my bike?"):
            return sorted(m["text"] for m in memory.query("kim", question).messages)

        assert shown() == ["I like tea.", "My bike is red."]  # dense's best and the most recent
        (ski,) = memory.add("kim", [{"role": "user", "text": "I ski in winter."}])
        assert shown() == ["I ski in winter.", "My bike is red."]  # the recency index saw the add
        memory.forget("kim", [ski])
        assert shown() == ["I like tea.", "My bike is red."]  # and was rebuilt without the forgotten one
        assert "ski" not in memory.query("kim", "What do I do in winter?").text
