"""BM25 statistics scored at query time: equal to a full rebuild and to bm25s' Lucene scores after appends
and deletions, on random corpora; stored as blocks of their own words, loaded only where they still match."""

import logging
import random

import bm25s
import numpy as np
import pytest

from lazymem.retrieval.base import top_k
from lazymem.retrieval.bm25_stats import BM25Stats, text_marks

logging.getLogger("bm25s").setLevel(logging.WARNING)

REBUILD_TOL = 1e-6  # absolute, against statistics built from all documents at once
BM25S_RTOL = 1e-6  # relative, against bm25s: about 8 float32 ulps (the scores come out identical)


def corpus(rng: random.Random, n: int, vocab: int) -> list[list[str]]:
    """Documents of 0-30 tokens over a skewed vocabulary: frequent words, rare ones, repeats, empty docs."""
    words = [f"w{i}" for i in range(vocab)]
    return [
        [words[min(int(rng.paretovariate(0.8)) - 1, vocab - 1)] for _ in range(rng.randint(0, 30))]
        for _ in range(n)
    ]


def grown(docs, rng: random.Random, block_docs: int, k1=1.5, b=0.75) -> BM25Stats:
    """The statistics of `docs` appended in random batches."""
    stats, at = BM25Stats(k1=k1, b=b, block_docs=block_docs), 0
    while at < len(docs):
        step = rng.randint(1, 40)
        stats = stats.append(docs[at : at + step])
        at += step
    return stats


def queries(rng: random.Random, vocab: int, n: int = 15) -> list[list[str]]:
    words = [f"w{i}" for i in range(vocab)] + ["unseen"]
    return [[rng.choice(words) for _ in range(rng.randint(1, 6))] for _ in range(n)]


def bm25s_scores(docs, query, k1=1.5, b=0.75) -> np.ndarray:
    engine = bm25s.BM25(k1=k1, b=b, method="lucene")
    engine.index(docs, show_progress=False)
    known = [t for t in query if t in engine.vocab_dict]  # as lazymem.retrieval.bm25.BM25Index asks it
    return np.asarray(engine.get_scores(known), np.float32) if known else np.zeros(len(docs), np.float32)


def assert_same_ranking(got: np.ndarray, want: np.ndarray, k: int = 10) -> None:
    assert top_k(got, k, positive_only=True).indices == top_k(want, k, positive_only=True).indices


@pytest.mark.parametrize("seed", range(6))
def test_appends_equal_a_full_rebuild_and_bm25s(seed):
    rng = random.Random(seed)
    vocab = rng.choice([5, 40, 400])
    docs = corpus(rng, rng.randint(1, 500), vocab)
    k1, b = rng.choice([(1.5, 0.75), (1.2, 0.4), (0.9, 1.0)])
    full = BM25Stats.build(docs, k1=k1, b=b, block_docs=rng.randint(1, 300))
    stats = grown(docs, rng, block_docs=rng.randint(1, 300), k1=k1, b=b)
    assert stats.size == full.size == len(docs)
    for query in queries(rng, vocab):
        got, rebuilt = stats.scores(query), full.scores(query)
        np.testing.assert_allclose(got, rebuilt, rtol=0, atol=REBUILD_TOL)
        assert_same_ranking(got, rebuilt)
        if any(docs):  # bm25s cannot index a corpus without a token
            reference = bm25s_scores(docs, query, k1, b)
            np.testing.assert_allclose(got, reference, rtol=BM25S_RTOL, atol=0)
            assert_same_ranking(got, reference)


@pytest.mark.parametrize("seed", range(4))
def test_after_deletions_stored_blocks_plus_appends_equal_a_rebuild(seed):
    """A deletion: blocks before the first deleted document are kept (their marks match), the rest is
    appended from the documents that remain; scores equal a rebuild and bm25s over what remains."""
    rng = random.Random(100 + seed)
    docs = corpus(rng, 300, 60)
    texts = [" ".join(d) + f" #{i}" for i, d in enumerate(docs)]  # distinct texts, distinct marks
    stored = BM25Stats.build(docs, text_marks(texts), block_docs=32).to_blocks()
    gone = set(rng.sample(range(300), rng.randint(1, 40)))
    left = [i for i in range(300) if i not in gone]
    docs2, marks2 = [docs[i] for i in left], text_marks([texts[i] for i in left])
    loaded = BM25Stats.from_blocks(stored, marks2, block_docs=32)
    assert loaded.size == (min(gone) // 32) * 32  # every full block before the first deletion
    stats = loaded.append(docs2[loaded.size :], marks2[loaded.size :])
    full = BM25Stats.build(docs2, block_docs=32)
    for query in queries(rng, 60):
        np.testing.assert_allclose(stats.scores(query), full.scores(query), rtol=0, atol=REBUILD_TOL)
        reference = bm25s_scores(docs2, query)
        np.testing.assert_allclose(stats.scores(query), reference, rtol=BM25S_RTOL, atol=0)
        assert_same_ranking(stats.scores(query), reference)


def test_ties_go_to_the_earlier_document_as_in_a_rebuild():
    docs = [["apple", "pie"], ["apple", "pie"], ["pear"], ["apple", "pie"]]
    stats = BM25Stats(block_docs=2).append(docs[:1]).append(docs[1:])
    assert top_k(stats.scores(["apple"]), None, positive_only=True).indices == (0, 1, 3)


def test_a_repeated_query_token_counts_twice_and_an_unseen_one_not_at_all():
    stats = BM25Stats.build([["a", "b"], ["b", "c", "c"], []])
    once = stats.scores(["c"])
    assert once[1] > 0 and once[0] == once[2] == 0
    np.testing.assert_array_equal(stats.scores(["c", "c", "nope"]), 2 * once)
    assert not BM25Stats().scores(["a"]).size
    assert not stats.scores([]).any()


def test_append_leaves_the_older_statistics_as_they_were():
    first = BM25Stats(block_docs=3).append([["a"], ["a", "b"]])
    before = first.scores(["a", "b"])
    later = first.append([["b"], ["b", "c"], ["a"]])
    np.testing.assert_array_equal(first.scores(["a", "b"]), before)
    assert (first.size, later.size) == (2, 5)
    assert later.scores(["c"])[3] > 0


def test_blocks_round_trip_and_hold_only_their_own_words():
    docs = [[f"first{i}", "shared"] for i in range(4)] + [[f"second{i}", "shared"] for i in range(4)]
    marks = text_marks([" ".join(d) for d in docs])
    stats = BM25Stats.build(docs, marks, block_docs=4)
    blocks = stats.to_blocks()
    assert sorted(blocks) == [0, 1]
    assert b"first0" in blocks[0] and b"first0" not in blocks[1]
    assert b"second0" in blocks[1] and b"second0" not in blocks[0]
    loaded = BM25Stats.from_blocks(blocks, marks, block_docs=4)
    np.testing.assert_array_equal(loaded.marks, marks)
    for query in (["shared"], ["first2", "second3"], ["shared", "first0"]):
        np.testing.assert_array_equal(loaded.scores(query), stats.scores(query))


def test_to_blocks_since_names_only_the_blocks_that_changed():
    stats = BM25Stats.build([["a"]] * 10, block_docs=4)  # blocks of 4, 4 and 2 documents
    assert sorted(stats.to_blocks()) == [0, 1, 2]
    assert sorted(stats.to_blocks(since=8)) == [2]
    assert sorted(stats.to_blocks(since=7)) == [1, 2]
    assert stats.to_blocks(since=10) == {}
    grown_ = stats.append([["b"]])  # grows the partial block, stored again as block 2
    assert sorted(grown_.to_blocks(since=stats.size)) == [2]


def test_a_partial_stored_block_keeps_growing():
    docs = [["x", f"y{i}"] for i in range(7)]
    stats = BM25Stats.build(docs[:5], block_docs=4)
    loaded = BM25Stats.from_blocks(stats.to_blocks(), block_docs=4).append(docs[5:])
    assert loaded.block_count == 2
    want = BM25Stats.build(docs, block_docs=4).scores(["x", "y6"])
    np.testing.assert_array_equal(loaded.scores(["x", "y6"]), want)


def test_loading_stops_at_a_changed_gapped_or_unreadable_block():
    docs = [[f"w{i}"] for i in range(12)]
    texts = [" ".join(d) for d in docs]
    marks = text_marks(texts)
    blocks = BM25Stats.build(docs, marks, block_docs=4).to_blocks()
    assert BM25Stats.from_blocks(blocks, marks, block_docs=4).size == 12
    changed = text_marks(texts[:5] + ["edited"] + texts[6:])
    assert BM25Stats.from_blocks(blocks, changed, block_docs=4).size == 4  # block 1 holds the edit
    assert BM25Stats.from_blocks(blocks, marks[:6], block_docs=4).size == 4  # fewer documents now
    assert BM25Stats.from_blocks({0: blocks[0], 2: blocks[2]}, block_docs=4).size == 4
    assert BM25Stats.from_blocks({0: blocks[0], 1: blocks[2]}, block_docs=4).size == 4  # not contiguous
    assert BM25Stats.from_blocks({0: blocks[0], 1: blocks[1][:-3]}, block_docs=4).size == 4
    assert BM25Stats.from_blocks({0: b"pickle?" + blocks[0]}, block_docs=4).size == 0


def test_bad_input_is_refused_with_what_is_wrong():
    with pytest.raises(ValueError, match="marks"):
        BM25Stats().append([["a"], ["b"]], np.zeros(1, np.uint64))
    with pytest.raises(ValueError, match="block_docs"):
        BM25Stats(block_docs=0)


def test_any_word_survives_the_block_format():
    docs = [["a\x00b", "é", "日本"], ["a", "b", "日本", "zz"], ["\x00"]]
    blocks = BM25Stats.build(docs, block_docs=2).to_blocks()
    loaded = BM25Stats.from_blocks(blocks, block_docs=2)
    for word in ("a\x00b", "é", "日本", "a", "zz", "\x00", "b"):
        np.testing.assert_array_equal(loaded.scores([word]), BM25Stats.build(docs).scores([word]))
        assert loaded.scores([word]).any(), word
    assert not loaded.scores(["a\x00", "日"]).any()


def test_text_marks_tell_texts_apart():
    marks = text_marks(["a", "b", "a"])
    assert marks.dtype == np.uint64 and marks[0] == marks[2] != marks[1]
