"""The hybrid pipeline: per-history index reuse, fusion -> rerank -> top n, timings, Message.idx."""

import hashlib

import numpy as np
import pytest

from lazymem.data.schema import History, Message
from lazymem.retrieval.base import Ranking, Reranker, Retriever
from lazymem.retrieval.bm25 import BM25Retriever
from lazymem.retrieval.dense import DenseRetriever
from lazymem.retrieval.embed_cache import EmbeddingCache
from lazymem.retrieval.fusion import RRF
from lazymem.retrieval.hybrid import HybridRetriever
from lazymem.retrieval.rerank import NoReranker

TEXTS = [
    "I moved to Porto in 2021 for a new job.",
    "Porto is lovely; the riverside is great for walks.",
    "My manager asked me to lead the data migration project.",
    "The data migration finished two weeks early.",
    "I am thinking of getting a cat, maybe a tabby.",
    "Tabby cats are friendly and easy to care for.",
]


class HashEncoder:
    """Deterministic stand-in for the bi-encoder (no model load)."""

    identity = "hash-encoder"

    def encode(self, texts):
        out = []
        for t in texts:
            seed = int.from_bytes(hashlib.sha256(t.encode()).digest()[:4], "little")
            v = np.random.default_rng(seed).standard_normal(8).astype(np.float32)
            out.append(v / np.linalg.norm(v))
        return np.stack(out)


class FixedRetriever(Retriever):
    """Always returns the same ranking of list positions: makes fusion and reranking checkable by hand."""

    embedded = 0

    def __init__(self, order):
        self.order = order

    def build(self, messages):
        return self

    def search(self, query, k=None):
        idx = self.order[:k] if k is not None else self.order
        return Ranking(tuple(idx), tuple(float(-r) for r in range(len(idx))))


class ReverseIdxReranker(Reranker):
    """Scores a message by its index: reranking puts the latest message first."""

    def __init__(self):
        self.seen = 0

    def score(self, query, messages):
        self.seen = len(messages)
        return [float(m.idx) for m in messages]


def history(hid="h", texts=TEXTS, offset=0):
    return History(
        hid, [Message(offset + i, f"s{i // 2}", "2023/02/01", "user", t) for i, t in enumerate(texts)]
    )


def hybrid(tmp_path, **kw):
    return HybridRetriever(
        {"bm25": BM25Retriever(), "dense": DenseRetriever(HashEncoder(), EmbeddingCache(tmp_path))}, **kw
    )


def test_index_is_built_once_per_history(tmp_path):
    retriever = hybrid(tmp_path)
    a = retriever.index(history("conv-1"))
    assert retriever.index(history("conv-1")) is a  # a second question on the same conversation
    assert retriever.builds == 1
    retriever.index(history("conv-2"))
    assert retriever.builds == 2
    # Same id, different content: never serve the stale index.
    changed = retriever.index(history("conv-1", TEXTS[:-1]))
    assert changed is not a and retriever.builds == 3


def test_least_recently_used_index_is_evicted(tmp_path):
    retriever = hybrid(tmp_path, max_cached_indexes=2)
    for hid in ("a", "b", "a", "c"):  # "b" is the least recently used when "c" arrives
        retriever.index(history(hid))
    assert retriever.builds == 3
    retriever.index(history("a"))
    assert retriever.builds == 3
    retriever.index(history("b"))
    assert retriever.builds == 4


def test_timings_and_build_seconds(tmp_path):
    index = hybrid(tmp_path).index(history())
    assert set(index.build_timings) == {"bm25", "dense"}
    assert index.build_seconds > 0 and index.embedded == len(TEXTS)
    result = index.search("data migration project")
    assert {"bm25", "dense", "fusion", "rerank", "total"} <= set(result.timings)
    assert all(isinstance(v, float) and v >= 0 for v in result.timings.values())
    assert result.timings["bm25"] > 0 and result.timings["dense"] > 0 and result.timings["fusion"] > 0
    assert result.timings["rerank"] == 0.0  # no reranker ran
    assert result.indices[0] in (2, 3) and len(result.indices) == len(result.scores)


def test_none_reranker_keeps_fusion_order_and_cuts_to_n():
    a, b = [0, 1, 2, 3, 4, 5], [5, 3, 1, 0, 2, 4]
    retriever = HybridRetriever(
        {"bm25": FixedRetriever(a), "dense": FixedRetriever(b)}, fusion=RRF(k=60), reranker=NoReranker(), n=4
    )
    result = retriever.index(history()).search("anything")
    fused = RRF(k=60).fuse({"bm25": Ranking(tuple(a), (0,) * 6), "dense": Ranking(tuple(b), (0,) * 6)})
    assert result.indices == list(fused.indices[:4])
    assert result.scores == pytest.approx(list(fused.scores[:4]))
    assert result.ranked == {"bm25": tuple(a), "dense": tuple(b)}


def test_candidate_cap_only_applies_when_a_reranker_scores():
    retriever = HybridRetriever({"bm25": FixedRetriever([0, 1, 2, 3, 4, 5])}, n=5, rerank_candidates=2)
    assert retriever.index(history()).search("q").indices == [0, 1, 2, 3, 4]


def test_reranker_reorders_candidates_and_keeps_top_n():
    reranker = ReverseIdxReranker()
    retriever = HybridRetriever(
        {"bm25": FixedRetriever([0, 1, 2, 3, 4, 5])}, reranker=reranker, n=2, rerank_candidates=4
    )
    result = retriever.index(history()).search("anything")
    assert reranker.seen == 4  # only the top fused candidates are scored
    assert result.indices == [3, 2] and result.scores == [3.0, 2.0]
    assert result.timings["rerank"] > 0


def test_depth_limits_what_enters_fusion():
    retriever = HybridRetriever(
        {"bm25": FixedRetriever([0, 1, 2, 3]), "dense": FixedRetriever([5, 4, 3, 2])},
        fusion=RRF(depth={"bm25": 1, "dense": 2}),
        n=50,
    )
    result = retriever.index(history()).search("q")
    assert sorted(result.indices) == [0, 4, 5]
    assert result.ranked == {"bm25": (0,), "dense": (5, 4)}


def test_single_retriever_keeps_its_own_scores(tmp_path):
    retriever = HybridRetriever({"bm25": BM25Retriever(), "dense": None}, n=3)
    result = retriever.index(history()).search("tabby cat")
    assert result.indices[:2] in ([4, 5], [5, 4])
    assert result.timings["fusion"] == 0.0 and "dense" not in result.timings  # a switched-off retriever
    own = BM25Retriever().build(history().messages).search("tabby cat")
    assert result.scores == pytest.approx(list(own.scores[:3]))  # BM25 scores, not RRF scores


def test_results_name_message_idx_not_list_position(tmp_path):
    retriever = HybridRetriever({"bm25": BM25Retriever()})
    result = retriever.index(history(offset=100)).search("data migration")
    assert set(result.indices) <= set(range(100, 106)) and result.indices[0] in (102, 103)


def test_search_shortcut_and_n_override(tmp_path):
    retriever = hybrid(tmp_path, n=50)
    assert len(retriever.search(history(), "Porto cat data", n=2).indices) == 2
    assert len(retriever.search(history(), "Porto cat data").indices) == len(TEXTS)  # fewer than n exist


def test_needs_a_retriever():
    with pytest.raises(ValueError):
        HybridRetriever({"bm25": None})


class SlowRetriever(FixedRetriever):
    """Sleeps in search and notes the threads it ran on, so concurrency shows in the timings."""

    def __init__(self, order, seconds, threads):
        super().__init__(order)
        self.seconds, self.threads = seconds, threads

    def search(self, query, k=None):
        import threading
        import time

        self.threads.add(threading.get_ident())
        time.sleep(self.seconds)
        return super().search(query, k)


def test_parallel_retrievers_give_the_same_result_in_the_wall_time_of_the_slowest():
    h = history()
    results = {}
    for parallel in (False, True):
        threads: set[int] = set()
        retriever = HybridRetriever(
            {
                "bm25": SlowRetriever([0, 1, 2, 3, 4, 5], 0.3, threads),
                "dense": SlowRetriever([5, 4, 3, 2, 1, 0], 0.3, threads),
            },
            n=4,
            parallel=parallel,
        )
        results[parallel] = (retriever.search(h, "q"), len(threads))
    (seq, seq_threads), (par, par_threads) = results[False], results[True]
    assert par.indices == seq.indices and par.ranked == seq.ranked
    assert seq_threads == 1 and par_threads == 2
    assert seq.timings["total"] >= 0.6 and par.timings["total"] < 0.55  # total is wall-clock time
    assert min(par.timings["bm25"], par.timings["dense"]) >= 0.3  # each stage keeps its own time


def test_a_longer_history_is_built_from_scratch_the_agents_growth_is_not_here(tmp_path):
    """Growing an index after an add is the agent memory's (lazymem/agent/user_retrieval.py): the research
    pipeline builds each new history anew, reading every earlier vector back from the cache."""
    retriever = hybrid(tmp_path)
    first = history("u", TEXTS[:4])
    retriever.index(first)
    cache = retriever.retrievers["dense"].cache
    hits = cache.hits
    more = History("u", [*first.messages, *history("u", TEXTS[4:], offset=4).messages])
    grown = retriever.index(more)
    assert retriever.builds == 2 and grown.indexes["dense"].embedded == 2
    assert cache.hits - hits == 4  # every earlier vector was read back
    assert not hasattr(retriever, "for_user") and not hasattr(retriever, "vector_keys")
