"""BM25: both backends find the exact-term match, agree with each other, and tokenise as configured."""

import numpy as np
import pytest

from lazymem.data.schema import History, Message
from lazymem.retrieval.bm25 import BM25Retriever, Tokenizer

TEXTS = [
    "We talked about the weather in Lisbon and the beaches there.",
    "My sister bought a saxophone at the flea market on Sunday.",
    "I usually run five kilometres before work.",
    "The weather was grey, so we stayed in and watched films.",
    "Can you recommend a recipe for lentil soup?",
    "The saxophone needs new reeds before the concert.",
]


def history(texts=TEXTS, hid="h"):
    msgs = [
        Message(i, f"s{i // 2}", "2023/05/01 (Mon) 10:00", "user" if i % 2 == 0 else "assistant", t)
        for i, t in enumerate(texts)
    ]
    return History(hid, msgs)


@pytest.mark.parametrize("backend", ["bm25s", "rank_bm25"])
def test_exact_term_ranks_first(backend):
    index = BM25Retriever(backend=backend).build(history().messages)
    ranking = index.search("Where did the lentil soup recipe come from?")
    assert ranking.indices[0] == 4
    assert ranking.scores[0] > 0


def test_backends_agree_on_top_hit():
    msgs = history().messages
    fast, okapi = BM25Retriever(backend="bm25s"), BM25Retriever(backend="rank_bm25")
    for query in ["saxophone reeds concert", "weather in Lisbon", "kilometres before work", "flea market"]:
        a, b = fast.build(msgs).search(query), okapi.build(msgs).search(query)
        assert a.indices[0] == b.indices[0], query
        # The sets of messages sharing a term are identical: only the arithmetic differs.
        assert set(a.indices) == set(b.indices)


@pytest.mark.parametrize("backend", ["bm25s", "rank_bm25"])
def test_no_shared_term_gives_empty_ranking(backend):
    index = BM25Retriever(backend=backend).build(history().messages)
    assert len(index.search("zebra quantum")) == 0
    assert len(index.search("")) == 0
    assert len(index.search("the and of")) == 0  # stopwords only


@pytest.mark.parametrize("backend", ["bm25s", "rank_bm25"])
def test_empty_history_and_depth(backend):
    assert len(BM25Retriever(backend=backend).build([]).search("weather")) == 0
    index = BM25Retriever(backend=backend).build(history().messages)
    assert len(index.search("weather saxophone soup", k=2)) == 2
    assert np.all(np.diff(index.search("weather saxophone soup").scores) <= 0)


def test_template_feeds_role_and_time_to_the_index():
    msgs = history().messages
    plain = BM25Retriever(template="{text}").build(msgs)
    with_role = BM25Retriever(template="{role}: {text}").build(msgs)
    assert len(plain.search("assistant")) == 0
    assert set(with_role.search("assistant").indices) == {1, 3, 5}


def test_tokenizer_options():
    assert Tokenizer()("The Saxophone, the REEDS!") == ["saxophone", "reeds"]
    assert Tokenizer(stopwords=None)("The cat") == ["the", "cat"]
    assert Tokenizer(lowercase=False, stopwords=None)("The Cat") == ["The", "Cat"]
    assert Tokenizer(stopwords="en_plus")("what did my cat eat") == ["cat", "eat"]
    assert Tokenizer()("I ran 5 km") == ["i", "ran", "5", "km"]  # single characters and digits kept
    with pytest.raises(ValueError, match="stopwords"):
        Tokenizer(stopwords="klingon")


def test_unknown_backend_and_template_field_fail_early():
    with pytest.raises(ValueError, match="backend"):
        BM25Retriever(backend="lucene")
    with pytest.raises(ValueError, match="unknown field"):
        BM25Retriever(template="{speaker}: {text}")


def test_stemmer_needs_an_installed_library():
    try:
        tok = Tokenizer(stemmer="porter")
    except ImportError as err:
        assert "PyStemmer" in str(err) and "stemmer: null" in str(err)
    else:
        assert tok("running runs") == ["run", "run"]
    with pytest.raises(ValueError, match="stemmer"):
        Tokenizer(stemmer="lancaster")
