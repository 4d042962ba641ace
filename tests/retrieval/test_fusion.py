"""Reciprocal Rank Fusion against scores computed by hand."""

import pytest

from lazymem.retrieval.base import Ranking
from lazymem.retrieval.fusion import RRF


def ranking(*indices):
    return Ranking(tuple(indices), tuple(float(-r) for r in range(len(indices))))


def test_rrf_matches_hand_computed_scores():
    # bm25: 7, 3, 5    dense: 3, 9, 7    with k = 60, ranks from 1
    fused = RRF(k=60).fuse({"bm25": ranking(7, 3, 5), "dense": ranking(3, 9, 7)})
    expected = {
        3: 1 / 62 + 1 / 61,
        7: 1 / 61 + 1 / 63,
        9: 1 / 62,
        5: 1 / 63,
    }
    assert fused.indices == (3, 7, 9, 5)
    assert fused.scores == pytest.approx([expected[i] for i in fused.indices])


def test_small_k_sharpens_the_top():
    lists = {"a": ranking(1, 2), "b": ranking(2, 3)}
    fused = RRF(k=0).fuse(lists)
    assert fused.scores == pytest.approx([1 / 2 + 1 / 1, 1 / 1, 1 / 2])  # docs 2, 1, 3
    assert fused.indices == (2, 1, 3)


def test_depth_limits_each_list_separately():
    lists = {"bm25": ranking(1, 2, 3, 4), "dense": ranking(5, 6, 7, 4)}
    fused = RRF(k=60, depth={"bm25": 2, "dense": 3}).fuse(lists)
    assert set(fused.indices) == {1, 2, 5, 6, 7}  # 3 and 4 fell below both depths
    assert fused.scores[0] == pytest.approx(1 / 61)
    unlimited = RRF(k=60, depth={"bm25": None}).fuse(lists)
    assert set(unlimited.indices) == {1, 2, 3, 4, 5, 6, 7}


def test_weights_scale_a_retrievers_vote():
    lists = {"bm25": ranking(1), "dense": ranking(2)}
    assert RRF(k=60, weights={"dense": 2.0}).fuse(lists).indices == (2, 1)
    assert RRF(k=60, weights={"bm25": 2.0}).fuse(lists).indices == (1, 2)


def test_convexity_one_strong_rank_beats_two_middling_ones():
    # 4: ranks 1 and 3 -> 1/61 + 1/63 = 0.032266; 8: rank 2 twice -> 2/62 = 0.032258.
    fused = RRF(k=60).fuse({"a": ranking(4, 8, 2), "b": ranking(2, 8, 4)})
    assert fused.indices == (2, 4, 8)  # 2 and 4 tie exactly; the earlier message goes first


def test_ties_go_to_best_single_rank_then_earlier_message():
    # k = 0: 9 -> 1/1, 5 -> 1/1, 3 -> 1/2 + 1/2. A three-way tie at 1.0.
    fused = RRF(k=0).fuse({"a": ranking(9, 3), "b": ranking(5, 3)})
    assert fused.scores == pytest.approx([1.0, 1.0, 1.0])
    assert fused.indices == (5, 9, 3)


def test_empty_lists_and_bad_k():
    assert RRF().fuse({"a": ranking(), "b": ranking()}).indices == ()
    with pytest.raises(ValueError):
        RRF(k=-1)
