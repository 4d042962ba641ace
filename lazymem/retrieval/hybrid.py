"""Retrieve broadly (paper Section 3.1): retrievers -> Reciprocal Rank Fusion -> reranker -> top n.

    retriever = hydra.utils.instantiate(cfg.retrieval)
    index = retriever.index(history)          # built once per history, then reused
    result = index.search(question.text)      # result.indices: top-n Message.idx, best first

`parallel: true` runs the retrievers concurrently in threads, as the paper does (BM25 and dense at the same
time); `false` runs them one after the other, which on 2 CPU cores is as fast and gives clean per-stage
timings. `total` is the wall-clock time of the whole search either way. With a single retriever fusion is
skipped and its own scores are kept.
"""

from __future__ import annotations

import hashlib
import time
from collections import OrderedDict
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor

from lazymem.data.schema import History
from lazymem.retrieval.base import Index, Ranking, Reranker, Retriever, SearchResult
from lazymem.retrieval.dense import DenseRetriever
from lazymem.retrieval.fusion import RRF
from lazymem.retrieval.rerank import NoReranker


def fingerprint(history: History) -> str:
    """Content hash, so a reused history id with different messages is never served a stale index."""
    h = hashlib.blake2b(digest_size=16)
    for m in history.messages:
        h.update(f"{m.idx}\x1f{m.session_id}\x1f{m.time}\x1f{m.role}\x1f{m.text}\x1e".encode())
    return h.hexdigest()


class HistoryIndex:
    """Every retriever's index over one history, plus what it cost to build."""

    def __init__(
        self,
        history: History,
        indexes: dict[str, Index],
        build_timings: dict[str, float],
        owner: HybridRetriever,
    ):
        self.history_id = history.id
        self.messages = history.messages
        self.indexes = indexes
        self.build_timings = build_timings  # seconds per retriever
        self.build_seconds = sum(build_timings.values())
        self.embedded = sum(ix.embedded for ix in indexes.values())  # texts encoded
        self._owner = owner

    def search(self, query: str, n: int | None = None) -> SearchResult:
        owner = self._owner
        n = owner.n if n is None else n
        timings = dict.fromkeys(owner.stages, 0.0)
        start = time.perf_counter()

        def one(name: str) -> tuple[Ranking, float]:
            t0 = time.perf_counter()
            ranking = self.indexes[name].search(query, owner.fusion.depth_of(name))
            return ranking, time.perf_counter() - t0

        if owner.parallel and len(self.indexes) > 1:
            with ThreadPoolExecutor(len(self.indexes)) as pool:
                done = dict(zip(self.indexes, pool.map(one, self.indexes), strict=True))
        else:
            done = {name: one(name) for name in self.indexes}
        rankings: dict[str, Ranking] = {name: r for name, (r, _) in done.items()}
        timings.update({name: s for name, (_, s) in done.items()})

        t0 = time.perf_counter()
        if len(rankings) == 1:
            fused = next(iter(rankings.values()))
        else:
            fused = owner.fusion.fuse(rankings)
            timings["fusion"] = time.perf_counter() - t0

        candidates = fused.head(owner.rerank_candidates)
        t0 = time.perf_counter()
        scores = owner.reranker.score(query, [self.messages[i] for i in candidates.indices])
        if scores is not None:
            timings["rerank"] = time.perf_counter() - t0
            order = sorted(range(len(scores)), key=lambda j: -scores[j])  # stable: ties keep fused order
            final = Ranking(tuple(candidates.indices[j] for j in order), tuple(scores[j] for j in order))
        else:
            final = fused  # no reranker: the candidate cap does not apply
        final = final.head(n)
        timings["total"] = time.perf_counter() - start
        to_idx = [m.idx for m in self.messages]  # retrievers rank list positions; report Message.idx
        return SearchResult(
            indices=[to_idx[i] for i in final.indices],
            scores=list(final.scores),
            timings=timings,
            ranked={k: tuple(to_idx[i] for i in r.indices) for k, r in rankings.items()},
        )


class HybridRetriever:
    """Builds and caches a `HistoryIndex` per history; the object `cfg.retrieval` instantiates to.

    `retrievers` maps a name (the key used by `fusion.depth`/`weights` and in timings) to a retriever
    with `build(messages)`; a None entry is skipped, so a preset can switch one off. `rerank_candidates`
    caps how many fused messages the reranker scores (None: all); `n` is how many are returned; `parallel`
    runs the retrievers of one search concurrently.
    """

    def __init__(
        self,
        retrievers: Mapping[str, Retriever | None],
        fusion: RRF | None = None,
        reranker: Reranker | None = None,
        n: int = 50,
        rerank_candidates: int | None = None,
        max_cached_indexes: int = 16,
        parallel: bool = False,
    ):
        self.retrievers = {k: r for k, r in retrievers.items() if r is not None}
        if not self.retrievers:
            raise ValueError("retrieval needs at least one retriever")
        for name, r in self.retrievers.items():
            if not isinstance(r, Retriever):
                raise TypeError(
                    f"retrieval.retrievers.{name}: {type(r).__name__} is not a "
                    "lazymem.retrieval.base.Retriever (subclass it: build() indexes a history; problems() "
                    "and gpu_keys() have defaults)"
                )
        self.fusion = fusion if fusion is not None else RRF()
        self.reranker = reranker if reranker is not None else NoReranker()
        self.n = n
        self.rerank_candidates = rerank_candidates
        self.max_cached_indexes = max_cached_indexes
        self.parallel = parallel
        self.builds = 0  # indexes built (not served from memory)
        self._cache: OrderedDict[str, tuple[str, HistoryIndex]] = OrderedDict()

    @property
    def stages(self) -> tuple[str, ...]:
        """The timed stages of a search: each retriever by its name, then fusion and rerank."""
        return (*self.retrievers, "fusion", "rerank")

    def problems(self, where: str = "retrieval") -> list[str]:
        """What its retrievers and reranker miss before they can run, each with its config key."""
        found = [p for name, r in self.retrievers.items() for p in r.problems(f"{where}.retrievers.{name}")]
        return found + self.reranker.problems(f"{where}.reranker")

    def gpu_keys(self, where: str = "retrieval") -> list[str]:
        keys = [k for name, r in self.retrievers.items() for k in r.gpu_keys(f"{where}.retrievers.{name}")]
        return keys + self.reranker.gpu_keys(f"{where}.reranker")

    def index(self, history: History) -> HistoryIndex:
        key = fingerprint(history)
        hit = self._cache.get(history.id)
        if hit is not None and hit[0] == key:
            self._cache.move_to_end(history.id)
            return hit[1]
        indexes, build_timings = {}, {}
        for name, retriever in self.retrievers.items():
            t0 = time.perf_counter()
            indexes[name] = retriever.build(history.messages)
            build_timings[name] = time.perf_counter() - t0
        built = HistoryIndex(history, indexes, build_timings, self)
        self.builds += 1
        self._cache[history.id] = (key, built)
        self._cache.move_to_end(history.id)
        while len(self._cache) > self.max_cached_indexes:
            self._cache.popitem(last=False)
        return built

    def search(self, history: History, query: str, n: int | None = None) -> SearchResult:
        return self.index(history).search(query, n)

    def dense(self, name: str = "dense") -> DenseRetriever:
        """The dense retriever configured as `retrievers.NAME`, for methods that embed their own units
        (NanoMemory's turns) with the job's encoder and embedding cache."""
        retriever = self.retrievers.get(name)
        if not isinstance(retriever, DenseRetriever):
            raise ValueError(
                f"no dense retriever named {name!r} in this job's retrieval (it has "
                f"{sorted(self.retrievers)}): use a retrieval config with a dense retriever"
            )
        return retriever

    def clear(self) -> None:
        self._cache.clear()
