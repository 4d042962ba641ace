"""retrieval/base.py: Ranking.head, top_k's order, ties and positive_only, message templates (check and
render), and the hooks of Retriever and Reranker with their defaults."""

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
    check_template,
    render,
    top_k,
)

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


def test_a_retriever_has_only_the_three_research_hooks_and_two_default_to_nothing():
    hooks = {name for name, value in vars(Retriever).items() if callable(value) and not name.startswith("_")}
    assert hooks == {"build", "problems", "gpu_keys"}  # the agent's needs are lazymem.retrieval.per_user's
    assert Mine().problems("retrieval.retrievers.mine") == []
    assert Mine().gpu_keys("retrieval.retrievers.mine") == []


def test_reranker_score_must_be_implemented_and_its_other_hooks_are_empty():
    with pytest.raises(NotImplementedError, match="^MyReranker does not say how it scores$"):
        MyReranker().score("q", [MESSAGE])
    assert MyReranker().problems("retrieval.reranker") == []
    assert MyReranker().gpu_keys("retrieval.reranker") == []
