"""Sparse retrieval: Okapi BM25 over messages, with two interchangeable backends.

`rank_bm25` is the paper's Okapi BM25 (plain Python, scores every document per query); `bm25s` stores
eager sparse scores and is ~30x faster per query. Both get the same tokens from `Tokenizer`, so a change
of backend changes only the scoring arithmetic (bm25s' `method` picks its BM25 variant).
"""

from __future__ import annotations

import logging
import re
import sys
from collections.abc import Callable, Sequence

import numpy as np

from lazymem.data.schema import Message
from lazymem.retrieval.base import Ranking, Retriever, check_template, render, top_k

BACKENDS = ("bm25s", "rank_bm25")


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

    def _docs(self, messages: Sequence[Message]) -> list[list[str]]:
        # interned: the index keeps its documents' tokens, and a word stored once is 8 bytes per use
        return [list(map(sys.intern, self.tokenizer(render(m, self.template)))) for m in messages]
