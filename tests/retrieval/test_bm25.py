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


# The agent memory's per-user form: statistics grown, stored in the user's blocks, equal to bm25s


class FakeBlocks:
    """In memory, as `lazymem.retrieval.per_user.Blocks`: numbered blobs by (kind, name); `refuse` plays a
    user whose generation moved on (nothing written)."""

    def __init__(self):
        self.data: dict[tuple[str, str], dict[int, bytes]] = {}
        self.writes: list[dict[int, bytes | None]] = []
        self.refuse = False

    def read(self, kind, name, numbers=None):
        held = self.data.get((kind, name), {})
        return {n: b for n, b in held.items() if numbers is None or n in numbers}

    def write(self, kind, name, blocks, replace=False):
        if self.refuse:
            return False
        self.writes.append(dict(blocks))
        held = {} if replace else self.data.setdefault((kind, name), {})
        for n, b in blocks.items():
            if b is None:
                held.pop(n, None)
            else:
                held[n] = b
        self.data[(kind, name)] = held
        return True

    def numbers(self):
        return sorted(n for held in self.data.values() for n in held)


class FakeStorage:
    def __init__(self, blocks=None):
        self._blocks = blocks if blocks is not None else FakeBlocks()

    def blocks(self):
        return self._blocks


class Counting:
    """A tokenizer that counts the texts it tokenized (read `docs` before asking the index any query)."""

    def __init__(self, inner):
        self.inner, self.docs = inner, 0

    def __call__(self, text):
        self.docs += 1
        return self.inner(text)

    def __getattr__(self, name):
        return getattr(self.inner, name)


WORDS = ["lisbon", "weather", "saxophone", "reeds", "lentil", "soup", "market", "concert", "films", "sister"]


def long_history(n, seed=0, start=0):
    rng = np.random.default_rng(seed)
    texts = [" ".join(rng.choice(WORDS, size=rng.integers(1, 9))) + f" n{i}" for i in range(n)]
    return [Message(start + i, "s", "2023/05/01 (Mon) 10:00", "user", t) for i, t in enumerate(texts)]


def renumbered(msgs):
    return [Message(i, m.session_id, m.time, m.role, m.text) for i, m in enumerate(msgs)]


def user_form(storage, block_docs=8):
    from lazymem.retrieval.bm25 import UserBM25

    form = UserBM25(BM25Retriever(), storage, block_docs=block_docs)
    form.tokenizer = Counting(form.tokenizer)
    return form


def same_as_bm25s(index, msgs, queries=("weather lisbon", "saxophone reeds concert", "n3 soup", "sister")):
    reference = BM25Retriever().build(msgs)
    for q in queries:
        np.testing.assert_allclose(index.scores(q), reference.scores(q), rtol=1e-6, atol=0)
        assert index.search(q, 10).indices == reference.search(q, 10).indices


def test_per_user_form_keeps_statistics_only_for_bm25s_lucene():
    from lazymem.retrieval.bm25 import UserBM25
    from lazymem.retrieval.per_user import PerUserRetriever

    assert isinstance(BM25Retriever(), PerUserRetriever)
    assert isinstance(BM25Retriever().for_user(FakeStorage()), UserBM25)
    for other in (BM25Retriever(backend="rank_bm25"), BM25Retriever(method="robertson")):
        assert other.for_user(FakeStorage()) is other  # rebuilt from kept tokens, as before
    form = BM25Retriever().for_user(FakeStorage())
    assert form.vector_keys(history().messages) == {} and form.vector_width("any") is None


def test_build_stores_blocks_and_a_new_form_loads_them_without_tokenizing():
    storage, msgs = FakeStorage(), long_history(30)
    first = user_form(storage)
    index = first.build(msgs)
    assert first.tokenizer.docs == 30 and storage.blocks().numbers() == [0, 1, 2, 3]
    same_as_bm25s(index, msgs)
    again = user_form(storage)  # another process, or the user opened again
    index = again.build(msgs)
    assert again.tokenizer.docs == 0
    same_as_bm25s(index, msgs)
    more = msgs + long_history(5, seed=1, start=30)
    third = user_form(storage)
    index = third.build(more)
    assert third.tokenizer.docs == 5  # only the new messages
    same_as_bm25s(index, more)


def test_a_changed_history_reuses_the_blocks_before_the_change_and_drops_stale_ones():
    storage, msgs = FakeStorage(), long_history(40)
    user_form(storage).build(msgs)
    assert storage.blocks().numbers() == [0, 1, 2, 3, 4]
    left = renumbered(msgs[:19] + msgs[30:])  # a forget of 11 messages from position 19
    form = user_form(storage)
    index = form.build(left)
    assert form.tokenizer.docs == len(left) - 16  # blocks 0 and 1 (16 messages) still match
    same_as_bm25s(index, left)
    assert storage.blocks().numbers() == [0, 1, 2, 3]


def test_extend_grows_in_memory_and_writes_a_block_once_it_is_full():
    storage, msgs = FakeStorage(), long_history(10)
    form = user_form(storage)
    index = form.build(msgs)
    writes = len(storage.blocks().writes)
    grown = form.extend(index, long_history(3, seed=2, start=10))
    assert len(storage.blocks().writes) == writes  # block 1 still partial: left to the indexer
    all13 = msgs + long_history(3, seed=2, start=10)
    same_as_bm25s(grown, all13)
    same_as_bm25s(index, msgs)  # the older index still answers for its own messages
    full = form.extend(grown, long_history(4, seed=3, start=13))
    assert len(storage.blocks().writes) == writes + 1  # block 1 became full
    same_as_bm25s(full, all13 + long_history(4, seed=3, start=13))
    assert form.extend(full, []) is full
    assert form.extend(BM25Retriever().build(msgs), msgs) is None  # not an index of its own


def test_warm_appends_chunks_and_stores_them_for_the_first_query():
    storage, msgs = FakeStorage(), long_history(30)
    form = user_form(storage)
    assert sum(form.warm(msgs[i : i + 7]) for i in range(0, 30, 7)) == 30
    assert form.warm(msgs[7:14]) == 0  # already held
    assert storage.blocks().numbers() == [0, 1, 2, 3]
    reader = user_form(storage)
    index = reader.build(msgs)
    assert reader.tokenizer.docs == 0
    same_as_bm25s(index, msgs)


def test_warm_opened_on_stored_blocks_continues_from_them():
    storage, msgs = FakeStorage(), long_history(20)
    user_form(storage).build(msgs[:12])
    form = user_form(storage)
    assert form.warm(msgs[12:]) == 8  # a fresh form: the stored 12 are read, not tokenized
    assert form.tokenizer.docs == 8
    assert form.warm(long_history(2, start=40)) == 0  # a gap: the messages before it are unknown here
    same_as_bm25s(user_form(storage).build(msgs), msgs)


def test_warm_distrusts_blocks_of_other_messages_until_a_build_rewrites_them():
    storage, msgs = FakeStorage(), long_history(20)
    user_form(storage).build(long_history(20, seed=9))  # someone else's texts at the same positions
    form = user_form(storage)
    assert form.warm(msgs[:5]) == 0 and form.warm(msgs[5:10]) == 0
    same_as_bm25s(form.build(msgs), msgs)
    same_as_bm25s(user_form(storage).build(msgs), msgs)


def test_a_refused_write_is_retried_by_the_next_warm():
    storage, msgs = FakeStorage(), long_history(12)
    form = user_form(storage)
    storage.blocks().refuse = True
    form.warm(msgs[:6])
    assert storage.blocks().numbers() == []
    storage.blocks().refuse = False
    form.warm(msgs[6:])
    assert storage.blocks().numbers() == [0, 1]
    same_as_bm25s(user_form(storage).build(msgs), msgs)


def test_a_storage_without_blocks_grows_in_memory():
    class Folder:
        pass

    form = user_form(Folder())
    msgs = long_history(20)
    index = form.build(msgs[:15])
    same_as_bm25s(form.extend(index, msgs[15:]), msgs)
    assert form.warm(msgs[:3]) == 0
    form.close()


def test_stats_name_changes_with_what_decides_the_tokens_only():
    base = BM25Retriever().stats_name
    assert BM25Retriever(k1=1.2, b=0.5).stats_name == base  # scores' knobs: the same statistics serve
    assert BM25Retriever(template="{role}: {text}").stats_name != base
    assert BM25Retriever(stopwords="en_plus").stats_name != base
    assert BM25Retriever(lowercase=False).stats_name != base
