"""Sparse retrieval: Okapi BM25 over messages, with two interchangeable backends.

`rank_bm25` is the paper's Okapi BM25 (plain Python, scores every document per query); `bm25s` stores
eager sparse scores and is ~30x faster per query. Both get the same tokens from `Tokenizer`, so a change
of backend changes only the scoring arithmetic (bm25s' `method` picks its BM25 variant).

Research runs (`BM25Retriever.build`, paper mode's evaluation) use these engines as they are. The agent
memory's per-user form (`UserBM25`) keeps BM25's statistics instead (lazymem.retrieval.bm25_stats), equal
to bm25s' Lucene scores: grown after an add rather than rebuilt, and stored for the user's first query.
"""

from __future__ import annotations

import hashlib
import json
import logging
import re
import sys
import threading
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

import numpy as np

from lazymem.data.schema import Message
from lazymem.retrieval.base import Index, Ranking, Retriever, check_template, render, top_k
from lazymem.retrieval.bm25_stats import MAGIC, BM25Stats, text_marks

if TYPE_CHECKING:
    from lazymem.retrieval.per_user import Blocks, UserStorage

log = logging.getLogger(__name__)

BACKENDS = ("bm25s", "rank_bm25")
# Documents per stored block of the per-user statistics: what the indexer rewrites after an add at most
BLOCK_DOCS = 2048


def _load_stemmer(name: str) -> Callable[[str], str]:
    """A stemmer from an installed library; never a hand-written one."""
    if name not in ("snowball", "porter"):
        raise ValueError(f"stemmer must be null, 'snowball' or 'porter', not {name!r}")
    if name == "snowball":
        try:
            import Stemmer  # PyStemmer, the stemmer bm25s itself recommends

            return Stemmer.Stemmer("english").stemWord
        except ImportError:
            pass
    try:
        from nltk.stem import PorterStemmer, SnowballStemmer
    except ImportError as err:
        raise ImportError(
            f"stemmer={name!r} needs PyStemmer (`pip install PyStemmer`) or nltk; "
            "neither is installed. Set stemmer: null to tokenise without stemming."
        ) from err
    return SnowballStemmer("english").stem if name == "snowball" else PorterStemmer().stem


class Tokenizer:
    """Regex word tokens, optionally lowercased, stopword-filtered and stemmed."""

    def __init__(
        self,
        lowercase: bool = True,
        stopwords: str | None = "en",
        stemmer: str | None = None,
        token_pattern: str = r"(?u)\b\w+\b",
    ):
        self.lowercase = lowercase
        self.pattern = re.compile(token_pattern)
        # what decides the tokens, as `identity` names it
        self._settings = {
            "lowercase": lowercase,
            "stopwords": stopwords,
            "stemmer": stemmer,
            "pattern": token_pattern,
        }
        self.stopwords: frozenset[str] = frozenset()
        if stopwords:
            from bm25s import stopwords as lists

            # en: Lucene's 33 English stopwords; en_plus: a 179-word list that also drops "my", "what", "did"
            known = {"en": lists.STOPWORDS_EN, "en_plus": lists.STOPWORDS_EN_PLUS}
            if stopwords not in known:
                raise ValueError(f"stopwords must be null or one of {sorted(known)}, not {stopwords!r}")
            self.stopwords = frozenset(known[stopwords])
        self.stem = _load_stemmer(stemmer) if stemmer else None
        self._stem_memo: dict[str, str] = {}

    @property
    def identity(self) -> str:
        """Everything that decides the tokens of a text, the stemmer's library and version included (PyStemmer
        and nltk stem some words differently): stored statistics are valid only under the same identity."""
        settings = dict(self._settings)
        owner = getattr(self.stem, "__self__", None)
        if owner is not None:
            module = type(owner).__module__
            top = sys.modules.get(module.split(".")[0])
            settings["stemmer_impl"] = f"{module}=={getattr(top, '__version__', '')}"
        return json.dumps(settings, sort_keys=True)

    def __call__(self, text: str) -> list[str]:
        if self.lowercase:
            text = text.lower()
        tokens = [t for t in self.pattern.findall(text) if t.lower() not in self.stopwords]
        if self.stem is not None:
            memo = self._stem_memo
            tokens = [memo.get(t) or memo.setdefault(t, self.stem(t)) for t in tokens]
        return tokens


class BM25Index:
    """BM25 over one history's messages. `search` ranks positions in the list it was built on."""

    embedded = 0  # lexical: nothing to encode

    def __init__(
        self, docs: list[list[str]], tokenizer: Tokenizer, backend: str, k1: float, b: float, method: str
    ):
        self.tokenizer = tokenizer
        self.backend = backend
        self.docs = docs  # kept for `BM25Retriever.extend`
        self.size = len(docs)
        self._engine = None
        if not any(docs):  # empty history, or nothing left after stopwords: every score is 0
            return
        if backend == "rank_bm25":
            from rank_bm25 import BM25Okapi

            self._engine = BM25Okapi(docs, k1=k1, b=b)
        else:
            import bm25s

            logging.getLogger("bm25s").setLevel(logging.WARNING)  # it sets DEBUG on import

            self._engine = bm25s.BM25(k1=k1, b=b, method=method)
            self._engine.index(docs, show_progress=False)
            self._vocab = self._engine.vocab_dict

    def scores(self, query: str) -> np.ndarray:
        tokens = self.tokenizer(query)
        if self._engine is None or not tokens:
            return np.zeros(self.size, dtype=np.float32)
        if self.backend == "bm25s":
            # bm25s refuses tokens it never saw; an unseen token contributes nothing anyway.
            tokens = [t for t in tokens if t in self._vocab]
            if not tokens:
                return np.zeros(self.size, dtype=np.float32)
        return np.asarray(self._engine.get_scores(tokens), dtype=np.float32)

    def search(self, query: str, k: int | None = None) -> Ranking:
        """The k best messages sharing at least one term with the query (score > 0)."""
        return top_k(self.scores(query), k, positive_only=True)


class StatsIndex:
    """BM25 over kept statistics (`BM25Stats`), scored at query time: the per-user form's index."""

    embedded = 0

    def __init__(self, stats: BM25Stats, tokenizer: Tokenizer):
        self.stats, self.tokenizer, self.size = stats, tokenizer, stats.size

    def scores(self, query: str) -> np.ndarray:
        return self.stats.scores(self.tokenizer(query))

    def search(self, query: str, k: int | None = None) -> Ranking:
        """The k best messages sharing at least one term with the query (score > 0)."""
        return top_k(self.scores(query), k, positive_only=True)


class BM25Retriever(Retriever):
    """Builds a `BM25Index` per history. All arguments are config knobs (conf/retrieval/*.yaml)."""

    name = "bm25"

    def __init__(
        self,
        backend: str = "bm25s",
        k1: float = 1.5,
        b: float = 0.75,
        method: str = "lucene",
        template: str = "{text}",
        lowercase: bool = True,
        stopwords: str | None = "en",
        stemmer: str | None = None,
        token_pattern: str = r"(?u)\b\w+\b",
    ):
        if backend not in BACKENDS:
            raise ValueError(f"bm25 backend must be one of {BACKENDS}, not {backend!r}")
        self.backend, self.k1, self.b, self.method = backend, k1, b, method
        self.template = check_template(template)
        self.tokenizer = Tokenizer(lowercase, stopwords, stemmer, token_pattern)

    def build(self, messages: Sequence[Message]) -> BM25Index:
        return BM25Index(self._docs(messages), self.tokenizer, self.backend, self.k1, self.b, self.method)

    def extend(self, index: BM25Index, messages: Sequence[Message]) -> BM25Index:
        """Scores depend on every document (idf, mean length), so the engine is built anew, but from the
        tokens the index kept: at 100,000 messages, tokenizing was about half of a 5 s build."""
        docs = index.docs + self._docs(messages)
        return BM25Index(docs, self.tokenizer, self.backend, self.k1, self.b, self.method)

    # The agent memory's port (lazymem.retrieval.per_user.PerUserRetriever)

    def for_user(self, storage: UserStorage) -> BM25Retriever:
        """One user's form. With bm25s' Lucene scoring, `UserBM25`: statistics grown after an add, kept in
        the user's blocks, scored at query time. Otherwise itself (rebuilt from the kept tokens after an
        add), as only the Lucene scorer is shown equal to bm25s."""
        if self.backend == "bm25s" and self.method == "lucene":
            return UserBM25(self, storage)
        return self

    def warm(self, messages: Sequence[Message]) -> int:
        return 0

    def vector_keys(self, messages: Sequence[Message]) -> dict[str, set[str]]:
        return {}  # BM25 stores no vectors

    def vector_width(self, model: str) -> int | None:
        return None

    def close(self) -> None:
        pass

    @property
    def stats_name(self) -> str:
        """The identity of stored statistics: what decides their tokens (template, tokenizer) and their
        format. k1 and b are left out: they enter only at query time, so the same statistics serve any."""
        spec = json.dumps([self.template, self.tokenizer.identity, MAGIC.hex()])
        return "lucene-" + hashlib.blake2b(spec.encode(), digest_size=12).hexdigest()

    def _texts(self, messages: Sequence[Message]) -> list[str]:
        return [render(m, self.template) for m in messages]

    def _tokens(self, texts: Sequence[str]) -> list[list[str]]:
        # interned: the index keeps its documents' tokens, and a word stored once is 8 bytes per use
        return [list(map(sys.intern, self.tokenizer(t))) for t in texts]

    def _docs(self, messages: Sequence[Message]) -> list[list[str]]:
        return self._tokens(self._texts(messages))


class UserBM25(BM25Retriever):
    """One user's BM25 over statistics (lazymem.retrieval.bm25_stats), stored as blocks of kind "bm25"
    under `stats_name` in the user's `storage.blocks()`.

    - `build`: the statistics it holds if they are the messages' first N, else the stored blocks that hold
      the first N (checked by their marks), with the rest appended; what the store lacked is written.
    - `extend` (a query right after an add): appends in memory. A block that became full is written at once;
      the partial last one waits for the indexer's next `warm`, so a restart re-tokenizes at most one block.
    - `warm` (the indexer, a chunk of new messages at a time): appends and writes every block not stored.
    A storage without `blocks` keeps nothing: each process builds from the messages once, then grows.
    """

    KIND = "bm25"

    def __init__(self, shared: BM25Retriever, storage: UserStorage, block_docs: int = BLOCK_DOCS):
        self.backend, self.k1, self.b, self.method = shared.backend, shared.k1, shared.b, shared.method
        self.template, self.tokenizer = shared.template, shared.tokenizer
        self._shared, self._storage, self.block_docs = shared, storage, block_docs
        self._store: Blocks | None | bool = None  # storage.blocks(), opened on first use (False: none)
        self._stats: BM25Stats | None = None  # the newest statistics of this user's messages
        self._saved = 0  # how many of their documents the store holds
        self._suspect = False  # stored blocks disagreed with a warmed chunk: only a build checks them all
        self._lock = threading.Lock()
        self._name = self.stats_name

    def for_user(self, storage: UserStorage) -> UserBM25:
        return UserBM25(self._shared, storage, self.block_docs)

    def build(self, messages: Sequence[Message]) -> StatsIndex:
        texts = self._texts(messages)
        marks = text_marks(texts)
        with self._lock:
            held = self._stats
            if held is not None and not np.array_equal(held.marks, marks[: held.size]):
                held = None
            if held is not None and held.size == len(messages):
                return StatsIndex(held, self.tokenizer)
            stored = self._read()
            loaded = BM25Stats.from_blocks(stored, marks, **self._params())
            base = held if held is not None and held.size > loaded.size else loaded
            stats = base.append(self._tokens(texts[base.size :]), marks[base.size :])
            self._stats, self._saved, self._suspect = stats, loaded.size, False
            stale = {n: None for n in stored if n >= stats.block_count}
            self._flush(stats, stale)
        return StatsIndex(stats, self.tokenizer)

    def extend(self, index: Index, messages: Sequence[Message]) -> StatsIndex | None:
        if not isinstance(index, StatsIndex):
            return None
        if not messages:
            return index
        texts = self._texts(messages)
        stats = index.stats.append(self._tokens(texts), text_marks(texts))
        with self._lock:
            if self._stats is None or stats.size > self._stats.size:
                self._stats = stats
                if stats.size // self.block_docs > self._saved // self.block_docs:  # a block became full
                    self._flush(stats, {})
        return StatsIndex(stats, self.tokenizer)

    def warm(self, messages: Sequence[Message]) -> int:
        """Append a chunk of the user's messages (`Message.idx` their positions) to the statistics, and store
        them; how many messages it tokenized. A chunk beyond what it holds (the messages before it unknown
        here) is left to the next build."""
        if not messages:
            return 0
        first = messages[0].idx
        texts = self._texts(messages)
        marks = text_marks(texts)
        with self._lock:
            stats, stale = self._stats, {}
            if stats is None:
                if self._suspect:
                    return 0
                stored = self._read()  # checked below against the chunk where they overlap
                stats = BM25Stats.from_blocks(stored, **self._params())
                self._saved = stats.size
                stale = {n: None for n in stored if n >= stats.block_count}
            if first > stats.size:
                return 0
            overlap = min(stats.size - first, len(messages))
            if not np.array_equal(stats.marks[first : first + overlap], marks[:overlap]):
                self._stats, self._saved, self._suspect = None, 0, True
                return 0
            stats = stats.append(self._tokens(texts[overlap:]), marks[overlap:])
            self._stats = stats
            self._flush(stats, stale)
        return len(messages) - overlap

    def close(self) -> None:
        with self._lock:
            self._stats = None
            closer = getattr(self._store, "close", None)
            if closer is not None:
                closer()
            self._store = None

    def _tokens(self, texts: Sequence[str]) -> list[list[str]]:
        return [self.tokenizer(t) for t in texts]  # not kept (only the statistics are): no interning

    def _params(self) -> dict:
        return {"k1": self.k1, "b": self.b, "block_docs": self.block_docs}

    def _blocks(self) -> Blocks | None:
        if self._store is None:
            opener = getattr(self._storage, "blocks", None)
            self._store = opener() if opener is not None else False
        return self._store or None

    def _read(self) -> dict[int, bytes]:
        store = self._blocks()
        return store.read(self.KIND, self._name) if store is not None else {}

    def _flush(self, stats: BM25Stats, stale: dict[int, None]) -> None:
        """Write the blocks of `stats` the store lacks (from document `_saved` on) and delete `stale` ones."""
        store = self._blocks()
        if store is None:
            return
        writes = {**stale, **stats.to_blocks(since=self._saved)}
        if writes and store.write(self.KIND, self._name, writes):
            self._saved = stats.size
