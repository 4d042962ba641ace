"""Reciprocal Rank Fusion (Cormack, Clarke & Buettcher, 2009), the paper's way to merge ranked lists.

score(d) = sum over lists L containing d of weight_L / (k + rank_L(d)), ranks counted from 1. Only the
first `depth[L]` entries of each list take part, so a deep but noisy list cannot outvote a sharp one.
"""

from __future__ import annotations

from collections.abc import Mapping

from lazymem.retrieval.base import Ranking


class RRF:
    """`k` damps the top ranks (60 in the original paper); `depth` and `weights` are per retriever name."""

    def __init__(
        self,
        k: float = 60.0,
        depth: Mapping[str, int | None] | None = None,
        weights: Mapping[str, float] | None = None,
    ):
        if k < 0:
            raise ValueError(f"rrf k must be >= 0, got {k}")
        self.k = k
        self.depth = dict(depth or {})
        self.weights = dict(weights or {})

    def depth_of(self, name: str) -> int | None:
        return self.depth.get(name)

    def fuse(self, rankings: Mapping[str, Ranking]) -> Ranking:
        """One list, best first. Ties go to the better single-list rank, then the earlier message."""
        score: dict[int, float] = {}
        best_rank: dict[int, int] = {}
        for name, ranking in rankings.items():
            weight = self.weights.get(name, 1.0)
            for rank, idx in enumerate(ranking.head(self.depth_of(name)).indices, start=1):
                score[idx] = score.get(idx, 0.0) + weight / (self.k + rank)
                best_rank[idx] = min(best_rank.get(idx, rank), rank)
        order = sorted(score, key=lambda i: (-score[i], best_rank[i], i))
        return Ranking(tuple(order), tuple(score[i] for i in order))
