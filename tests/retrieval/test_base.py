"""retrieval/base.py: Ranking.head, top_k's order, ties and positive_only, message templates (check and
render), the defaults of the Retriever and Reranker hooks, and UserStorage's embedding cache."""

from __future__ import annotations

import numpy as np
import pytest

from lazymem.data.schema import Message
from lazymem.retrieval.base import (
    TEMPLATE_FIELDS,
    Ranking,
    Reranker,
    Retriever,
    SearchResult,
    UserStorage,
    check_template,
    render,
    top_k,
)
from lazymem.retrieval.embed_cache import EmbeddingCache

MESSAGE = Message(7, "s2", "2024/03/05 (Tue) 10:00", "assistant", "Biscuit is a lovely name.")


class Mine(Retriever):
    """A retriever that overrides nothing: every hook at its default."""


class MyReranker(Reranker):
    pass


def test_a_ranking_has_the_length_of_its_indices():
    assert len(Ranking((4, 1, 9), (3.0, 2.0, 1.0))) == 3
    assert len(Ranking((), ())) == 0


def test_head_keeps_the_best_depth_entries_with_their_scores():
    r = Ranking((4, 1, 9), (3.0, 2.0, 1.0))
    assert r.head(2) == Ranking((4, 1), (3.0, 2.0))
    assert r.head(10) == r
    assert r.head(0) == Ranking((), ())
    assert r.head(None) is r


def test_top_k_orders_by_score_descending():
    r = top_k(np.array([0.1, 0.9, 0.5, 0.7]), 3)
    assert r.indices == (1, 3, 2)
    assert r.scores == pytest.approx((0.9, 0.7, 0.5))
    assert all(type(i) is int for i in r.indices) and all(type(s) is float for s in r.scores)


def test_top_k_breaks_ties_towards_the_earlier_message():
    assert top_k(np.array([1.0, 2.0, 1.0, 2.0, 1.0]), None).indices == (1, 3, 0, 2, 4)
    assert top_k(np.zeros(4, dtype=np.float32), 2).indices == (0, 1)


def test_top_k_none_keeps_every_message_and_k_beyond_the_length_is_harmless():
    scores = np.array([0.3, -0.2, 0.8])
    assert top_k(scores, None).indices == (2, 0, 1)
    assert top_k(scores, 10).indices == (2, 0, 1)
    assert top_k(scores, 0) == Ranking((), ())


def test_positive_only_drops_zero_and_negative_scores_before_k():
    scores = np.array([0.0, 1.5, -0.5, 0.2, 0.0])
    assert top_k(scores, None, positive_only=True).indices == (1, 3)
    assert top_k(scores, 1, positive_only=True).indices == (1,)
    assert top_k(np.zeros(3), 5, positive_only=True) == Ranking((), ())
    assert top_k(scores, None).indices == (1, 3, 0, 4, 2)  # without it the zeros and negatives stay


def test_top_k_of_no_messages_is_empty():
    assert top_k(np.zeros(0), 5) == Ranking((), ())


def test_check_template_returns_a_template_of_known_fields():
    every = " ".join(f"{{{f}}}" for f in TEMPLATE_FIELDS)
    assert check_template(every) == every
    assert check_template("[{time}] {role}: {text}") == "[{time}] {role}: {text}"
    assert check_template("{idx:>4} {{literal}}") == "{idx:>4} {{literal}}"  # format spec, doubled braces
    assert check_template("no fields at all") == "no fields at all"


def test_check_template_names_the_unknown_fields_and_the_allowed_ones():
    with pytest.raises(ValueError) as err:
        check_template("{speaker}: {text} ({date})")
    assert str(err.value) == (
        "template '{speaker}: {text} ({date})' uses unknown field(s) ['date', 'speaker']; "
        "allowed: ['idx', 'session_id', 'time', 'role', 'text']"
    )


def test_check_template_refuses_positional_fields():
    with pytest.raises(ValueError, match=r"unknown field\(s\) \[''\]"):
        check_template("{} said {text}")


def test_render_fills_every_field_of_the_message():
    assert render(MESSAGE, "{text}") == "Biscuit is a lovely name."
    assert render(MESSAGE, "#{idx} {session_id} [{time}] {role}: {text}") == (
        "#7 s2 [2024/03/05 (Tue) 10:00] assistant: Biscuit is a lovely name."
    )


def test_a_search_result_has_its_own_empty_ranked_lists():
    a, b = SearchResult([1], [0.5], {}), SearchResult([2], [0.4], {})
    a.ranked["bm25"] = (1,)
    assert b.ranked == {}


def test_build_must_be_implemented_and_the_error_names_the_class():
    with pytest.raises(NotImplementedError, match="^Mine does not say how it indexes messages$"):
        Mine().build([MESSAGE])


def test_the_other_retriever_hooks_default_to_keeping_nothing(tmp_path):
    r = Mine()
    assert r.for_user(UserStorage(tmp_path / "alice")) is r  # the shared object serves every user
    assert r.warm([MESSAGE]) == 0
    assert r.problems("retrieval.retrievers.mine") == []
    assert r.gpu_keys("retrieval.retrievers.mine") == []
    assert r.close() is None
    assert r.vector_keys([MESSAGE]) == {}  # no vectors: a partial deletion keeps none
    assert r.vector_width("any-model") is None  # nor any width to check an import's vectors against
    assert not (tmp_path / "alice").exists()  # nothing was derived for the user


def test_reranker_score_must_be_implemented_and_its_other_hooks_are_empty():
    with pytest.raises(NotImplementedError, match="^MyReranker does not say how it scores$"):
        MyReranker().score("q", [MESSAGE])
    assert MyReranker().problems("retrieval.reranker") == []
    assert MyReranker().gpu_keys("retrieval.reranker") == []


def test_user_storage_keeps_the_embedding_cache_in_its_folder(tmp_path):
    storage = UserStorage(tmp_path / "users" / "alice")
    cache = storage.embedding_cache()
    assert isinstance(cache, EmbeddingCache)
    assert cache.path == tmp_path / "users" / "alice" / "embeddings.sqlite"
    cache.put("model-a", {"k": np.array([1.0, 0.0], dtype=np.float32)})
    cache.close()
    assert (tmp_path / "users" / "alice" / "embeddings.sqlite").is_file()
    again = UserStorage(tmp_path / "users" / "alice").embedding_cache()
    assert again.get("model-a", ["k"])["k"].tolist() == [1.0, 0.0]
    again.close()
    other = UserStorage(tmp_path / "users" / "bob").embedding_cache()
    assert other.get("model-a", ["k"]) == {}  # another user's folder, another cache
    other.close()


def test_user_storage_is_frozen(tmp_path):
    storage = UserStorage(tmp_path)
    with pytest.raises(AttributeError):
        storage.dir = tmp_path / "other"


def test_keep_vectors_keeps_only_the_remaining_messages_vectors_and_no_other_file(tmp_path):
    storage = UserStorage(tmp_path / "alice")
    cache = storage.embedding_cache()
    gone = np.full(8, 7.25, dtype=np.float32)  # a byte pattern to look for in the file afterwards
    cache.put("enc", {"kept": np.ones(8, dtype=np.float32), "gone": gone})
    cache.put("old-encoder", {"kept": np.zeros(8, dtype=np.float32)})
    cache.close()
    (tmp_path / "alice" / "llm.sqlite").write_bytes(b"a reply about the forgotten text")
    (tmp_path / "alice" / "bm25").mkdir()
    (tmp_path / "alice" / "bm25" / "index").write_text("terms")

    storage.keep_vectors({"enc": {"gone"}})

    assert sorted(p.name for p in (tmp_path / "alice").iterdir()) == ["embeddings.sqlite"]
    again = storage.embedding_cache()
    assert set(again.get("enc", ["kept", "gone"])) == {"kept"}
    assert again.count("old-encoder") == 0  # a model the retrievers no longer name cannot be trimmed
    again.close()
    assert gone.tobytes() not in (tmp_path / "alice" / "embeddings.sqlite").read_bytes()
