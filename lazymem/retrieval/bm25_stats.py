"""BM25 kept as statistics and scored at query time, so that an index grows by appending documents.

bm25s scores eagerly: at index time it computes every (word, document) score from the idf and the mean
document length of the whole corpus, so one new document changes them all and the engine is built anew
(2.9 s at 100,000 messages). `BM25Stats` keeps only what those scores are made of: per block of documents,
the documents holding each word with its term frequency, and each document's length. A query computes the
scores of its own words. Appending documents leaves everything already kept as it is.

Scoring is Lucene's BM25 as bm25s computes it with `method="lucene"` (under numpy 2's type rules):

    idf(t)     = float32(log(1 + (N - df + 0.5) / (df + 0.5)))     # float64 arithmetic, stored as float32
    tfc(t, d)  = tf / (k1 * ((1 - b) + b * len(d) / avg_len) + tf)  # float64, avg_len = total length / N
    s(t, d)    = float32(idf(t) * tfc(t, d))
    score(q, d) = the float32 sum of s(t, d) over the query's tokens in order, a repeated token counted
                 each time; a token no document holds adds nothing.

Equality, for the same documents in the same order:
  (a) statistics grown by any sequence of appends score every query as statistics built from all the
      documents at once: the same integers feed the same operations, so the scores are identical (the
      tests allow 1e-6);
  (b) they score it as bm25s' `BM25(method="lucene")`: the same operations in the same precision; the
      tests allow 1e-6 relative (about 8 float32 ulps) and find the scores identical.
A deletion is a rebuild from the documents that remain, so both hold after it. Top-k ids are compared as
`lazymem.retrieval.base.top_k` ranks them: ties go to the earlier document.

Blocks. Documents are kept in blocks of `block_docs` consecutive documents (the last one partial, and
grown by the next appends), each with its own vocabulary (its words sorted in one byte string, found by
binary search, so loading a block makes no Python object per word): rewriting or deleting a block leaves no
word of its documents anywhere else. `to_blocks` serialises them as numbered byte strings of numpy arrays (no
pickle), and each block carries a 64-bit mark of every document it holds (`text_marks` of the rendered
text), so that `from_blocks` keeps only the blocks that still match the caller's current documents.
"""

from __future__ import annotations

import hashlib
import logging
import math
from collections.abc import Mapping, Sequence
from itertools import chain

import numpy as np

log = logging.getLogger(__name__)

MAGIC = b"LMBM25\x00\x01"  # format of a serialised block; another value is not read
_HEADER = np.dtype([("start", "<i8"), ("count", "<i8"), ("terms", "<i8"), ("nnz", "<i8"), ("words", "<i8")])
_HEADER_LEN = len(MAGIC) + _HEADER.itemsize


def text_marks(texts: Sequence[str]) -> np.ndarray:
    """A 64-bit digest of each text: what tells a stored block it still holds the caller's documents."""
    raw = b"".join(hashlib.blake2b(t.encode(), digest_size=8).digest() for t in texts)
    return np.frombuffer(raw, dtype="<u8").copy()


class _Vocab(dict):
    """Word -> local id; looking up a new word gives it the next id (so `map` over tokens builds it)."""

    def __missing__(self, word: str) -> int:
        self[word] = n = len(self)
        return n


def _narrow(values: np.ndarray) -> np.ndarray:
    """uint16 when every value fits (document offsets in a block, term frequencies), else uint32."""
    if values.size == 0 or int(values.max()) < 1 << 16:
        return values.astype("<u2")
    return values.astype("<u4")


class _Block:
    """`count` consecutive documents from `start`: word postings in CSC order (by word, then document).

    Its words are one byte string, sorted, with their offsets (`offsets[i]:offsets[i + 1]` is word i), found
    by binary search: loading a block builds no Python object per word, and holds no dict of them."""

    __slots__ = ("start", "count", "lengths", "marks", "words", "offsets", "indptr", "docs", "tfs", "total")

    def __init__(self, start, lengths, marks, words, offsets, indptr, docs, tfs):
        self.start, self.count = start, len(lengths)
        self.lengths, self.marks = lengths, marks
        self.words, self.offsets = words, memoryview(offsets)  # offsets: uint32, native order
        self.indptr, self.docs, self.tfs = indptr, docs, tfs
        self.total = int(lengths.sum(dtype=np.int64))

    def find(self, word: bytes) -> int | None:
        """The index of `word` (utf-8) among the block's words, or None."""
        words, offsets = self.words, self.offsets
        lo, hi = 0, len(offsets) - 1
        while lo < hi:
            mid = (lo + hi) // 2
            if words[offsets[mid] : offsets[mid + 1]] < word:
                lo = mid + 1
            else:
                hi = mid
        if lo < len(offsets) - 1 and words[offsets[lo] : offsets[lo + 1]] == word:
            return lo
        return None

    def postings(self, word: str, encoded: bytes) -> tuple[np.ndarray, np.ndarray] | None:
        i = self.find(encoded)
        if i is None:
            return None
        lo, hi = self.indptr[i], self.indptr[i + 1]
        return self.docs[lo:hi].astype(np.int64) + self.start, self.tfs[lo:hi]

    def vocab(self) -> dict[str, int]:
        """Word -> index, decoded (to grow a stored partial block)."""
        offsets, words = self.offsets, self.words
        return {words[offsets[i] : offsets[i + 1]].decode(): i for i in range(len(offsets) - 1)}

    def to_bytes(self) -> bytes:
        terms = len(self.offsets) - 1
        head = (self.start, self.count, terms, len(self.docs), len(self.words))
        parts = [MAGIC, np.array([head], dtype=_HEADER).tobytes()]
        parts += [self.marks.astype("<u8").tobytes(), self.lengths.astype("<u4").tobytes()]
        parts += [self.indptr.astype("<u4").tobytes(), np.asarray(self.offsets, "<u4").tobytes()]
        parts += [_width(self.docs), _width(self.tfs), self.docs.tobytes(), self.tfs.tobytes(), self.words]
        return b"".join(parts)

    @classmethod
    def from_bytes(cls, raw: bytes) -> _Block:
        if raw[: len(MAGIC)] != MAGIC or len(raw) < _HEADER_LEN + 2:
            raise ValueError("not a bm25 statistics block of this format")
        start, count, terms, nnz, size = (int(x) for x in np.frombuffer(raw, _HEADER, 1, len(MAGIC))[0])
        off = _HEADER_LEN
        fixed = 8 * count + 4 * count + 8 * (terms + 1)
        if min(start, count, terms, nnz, size) < 0 or len(raw) < off + fixed + 2:
            raise ValueError("a bm25 statistics block of the wrong size (truncated or corrupt)")
        marks = np.frombuffer(raw, "<u8", count, off)
        off += 8 * count
        lengths = np.frombuffer(raw, "<u4", count, off)
        off += 4 * count
        indptr = np.frombuffer(raw, "<u4", terms + 1, off)
        off += 4 * (terms + 1)
        offsets = np.frombuffer(raw, "<u4", terms + 1, off).astype(np.uint32)  # native order, for find
        off += 4 * (terms + 1)
        dw, tw = raw[off], raw[off + 1]
        off += 2
        if dw not in (2, 4) or tw not in (2, 4) or len(raw) != off + (dw + tw) * nnz + size:
            raise ValueError("a bm25 statistics block of the wrong size (truncated or corrupt)")
        docs = np.frombuffer(raw, f"<u{dw}", nnz, off)
        off += dw * nnz
        tfs = np.frombuffer(raw, f"<u{tw}", nnz, off)
        off += tw * nnz
        if (
            int(indptr[-1]) != nnz
            or int(offsets[-1]) != size
            or (terms and (np.diff(offsets.astype(np.int64)) < 0).any())
            or (nnz and int(docs.max()) >= count)
        ):
            raise ValueError("a bm25 statistics block whose words and postings disagree")
        return cls(start, lengths, marks, raw[off:], offsets, indptr, docs, tfs)


def _width(values: np.ndarray) -> bytes:
    return bytes([values.dtype.itemsize])


class _Open:
    """The last, partial block: postings in the order they were appended (within a word, documents rise),
    scanned at query time; sealed into a `_Block` when full. Growing it copies, never changes it, so an
    index holding it stays valid while a newer one grows."""

    __slots__ = ("start", "count", "lengths", "marks", "vocab", "terms", "docs", "tfs", "total")

    def __init__(self, start, lengths, marks, vocab, terms, docs, tfs):
        self.start, self.count = start, len(lengths)
        self.lengths, self.marks, self.vocab = lengths, marks, vocab
        self.terms, self.docs, self.tfs = terms, docs, tfs
        self.total = int(lengths.sum(dtype=np.int64))

    @classmethod
    def empty(cls, start: int) -> _Open:
        none = np.zeros(0, np.int64)
        return cls(start, none.astype(np.uint32), none.astype(np.uint64), _Vocab(), none, none, none)

    @classmethod
    def of(cls, block: _Block) -> _Open:
        """A stored partial block, to grow on."""
        vocab = _Vocab(block.vocab())
        terms = np.repeat(np.arange(len(vocab), dtype=np.int64), np.diff(block.indptr.astype(np.int64)))
        docs, tfs = block.docs.astype(np.int64), block.tfs.astype(np.int64)
        return cls(block.start, block.lengths, block.marks, vocab, terms, docs, tfs)

    def grow(self, docs: Sequence[Sequence[str]], marks: np.ndarray) -> _Open:
        vocab = _Vocab(self.vocab)
        flat = list(chain.from_iterable(docs))
        lengths = np.fromiter(map(len, docs), np.int64, len(docs))
        ids = np.fromiter(map(vocab.__getitem__, flat), np.int64, len(flat))
        at = np.repeat(np.arange(self.count, self.count + len(docs), dtype=np.int64), lengths)
        width = max(len(vocab), 1)
        pairs, tfs = np.unique(at * width + ids, return_counts=True)  # each (document, word) once, in order
        return _Open(
            self.start,
            np.concatenate([self.lengths, lengths.astype(np.uint32)]),
            np.concatenate([self.marks, marks.astype(np.uint64)]),
            vocab,
            np.concatenate([self.terms, pairs % width]),
            np.concatenate([self.docs, pairs // width]),
            np.concatenate([self.tfs, tfs]),
        )

    def postings(self, word: str, encoded: bytes) -> tuple[np.ndarray, np.ndarray] | None:
        i = self.vocab.get(word)
        if i is None:
            return None
        hit = np.flatnonzero(self.terms == i)
        return self.docs[hit] + self.start, self.tfs[hit]

    def sealed(self) -> _Block:
        """The same documents as a `_Block`: words sorted by their utf-8 bytes, postings by word."""
        encoded = [w.encode() for w in self.vocab]
        order = sorted(range(len(encoded)), key=encoded.__getitem__)
        rank = np.empty(len(order), np.int64)
        rank[order] = np.arange(len(order))
        terms = rank[self.terms]
        by_word = np.argsort(terms, kind="stable")  # documents keep their rising order within a word
        indptr = np.zeros(len(order) + 1, np.uint32)
        np.cumsum(np.bincount(terms, minlength=len(order)), out=indptr[1:])
        offsets = np.zeros(len(order) + 1, np.uint32)
        np.cumsum([len(encoded[i]) for i in order], out=offsets[1:])
        words = b"".join(encoded[i] for i in order)
        docs, tfs = _narrow(self.docs[by_word]), _narrow(self.tfs[by_word])
        return _Block(self.start, self.lengths, self.marks, words, offsets, indptr, docs, tfs)


class BM25Stats:
    """BM25 statistics of a list of tokenised documents, scored at query time (see the module docstring).

    Immutable: `append` returns new statistics that share every full block with these, so an index built
    on one keeps answering while the next one grows. `block_docs` documents make a block.
    """

    def __init__(
        self,
        k1: float = 1.5,
        b: float = 0.75,
        block_docs: int = 2048,
        blocks: Sequence[_Block] = (),
        tail: _Open | None = None,
    ):
        if block_docs < 1:
            raise ValueError(f"block_docs must be at least 1, not {block_docs}")
        self.k1, self.b, self.block_docs = float(k1), float(b), block_docs
        self._blocks = tuple(blocks)
        start = self._blocks[-1].start + self._blocks[-1].count if self._blocks else 0
        self._tail = tail if tail is not None else _Open.empty(start)
        self.size = start + self._tail.count  # N, documents
        self.total = sum(blk.total for blk in self._blocks) + self._tail.total  # tokens in all documents
        self._lengths: np.ndarray | None = None
        self._marks: np.ndarray | None = None

    @classmethod
    def build(cls, docs: Sequence[Sequence[str]], marks: np.ndarray | None = None, **params) -> BM25Stats:
        """Statistics of `docs` from scratch (what the equality is defined against)."""
        return cls(**params).append(docs, marks)

    @property
    def block_count(self) -> int:
        """How many blocks `to_blocks` numbers: the full ones and the partial last one if it holds any."""
        return len(self._blocks) + (1 if self._tail.count else 0)

    @property
    def lengths(self) -> np.ndarray:
        """Every document's length in tokens, in order."""
        if self._lengths is None:
            self._lengths = np.concatenate([blk.lengths for blk in self._parts()] or [np.zeros(0, np.uint32)])
        return self._lengths

    @property
    def marks(self) -> np.ndarray:
        """Every document's mark (uint64), in order; 0 where the caller gave none."""
        if self._marks is None:
            self._marks = np.concatenate([blk.marks for blk in self._parts()] or [np.zeros(0, np.uint64)])
        return self._marks

    def _parts(self) -> list[_Block | _Open]:
        return [*self._blocks, self._tail] if self._tail.count else list(self._blocks)

    def append(self, docs: Sequence[Sequence[str]], marks: np.ndarray | None = None) -> BM25Stats:
        """These statistics followed by `docs` (token lists), each with its mark (default 0)."""
        if not docs:
            return self
        marks = np.zeros(len(docs), np.uint64) if marks is None else np.asarray(marks, np.uint64)
        if len(marks) != len(docs):
            raise ValueError(f"marks: {len(marks)} for {len(docs)} documents")
        blocks, tail, done = list(self._blocks), self._tail, 0
        while done < len(docs):
            if tail.count >= self.block_docs:
                blocks.append(tail.sealed())
                tail = _Open.empty(tail.start + tail.count)
            take = self.block_docs - tail.count
            tail = tail.grow(docs[done : done + take], marks[done : done + take])
            done += take
        if tail.count >= self.block_docs:
            blocks.append(tail.sealed())
            tail = _Open.empty(tail.start + tail.count)
        return BM25Stats(self.k1, self.b, self.block_docs, blocks, tail)

    def postings(self, word: str) -> tuple[np.ndarray, np.ndarray]:
        """The documents holding `word` (rising) and its term frequency in each."""
        encoded = word.encode()
        found = [p for p in (part.postings(word, encoded) for part in self._parts()) if p is not None]
        if not found:
            return np.zeros(0, np.int64), np.zeros(0, np.int64)
        if len(found) == 1:
            return found[0]
        return np.concatenate([d for d, _ in found]), np.concatenate([t for _, t in found])

    def scores(self, query_tokens: Sequence[str]) -> np.ndarray:
        """Every document's BM25 score for the query's tokens (float32; see the module docstring)."""
        n = self.size
        out = np.zeros(n, dtype=np.float32)
        if n == 0 or not query_tokens:
            return out
        avg = np.float64(self.total) / np.float64(n)
        k1, b, lengths = self.k1, self.b, self.lengths
        memo: dict[str, tuple[np.ndarray, np.ndarray] | None] = {}
        for word in query_tokens:
            if word not in memo:
                docs, tf = self.postings(word)
                if not len(docs):
                    memo[word] = None
                    continue
                df = len(docs)
                idf = np.float64(np.float32(math.log(1 + (n - df + 0.5) / (df + 0.5))))
                tf = tf.astype(np.float64)
                tfc = tf / (k1 * ((1 - b) + b * lengths[docs].astype(np.float64) / avg) + tf)
                memo[word] = (docs, (idf * tfc).astype(np.float32))
            hit = memo[word]
            if hit is not None:
                out[hit[0]] += hit[1]  # a document appears once per word, so this is np.add.at
        return out

    def to_blocks(self, since: int = 0) -> dict[int, bytes]:
        """The serialised blocks by number (0 first), those holding any document at position >= `since`:
        what to write after appending to statistics of `since` documents that are already stored."""
        out = {}
        for number, part in enumerate(self._parts()):
            if part.start + part.count > since:
                out[number] = (part.sealed() if isinstance(part, _Open) else part).to_bytes()
        return out

    @classmethod
    def from_blocks(cls, blocks: Mapping[int, bytes], marks: np.ndarray | None = None, **params) -> BM25Stats:
        """Statistics from stored blocks 0, 1, 2, ...: the longest run of them that follow each other and,
        when `marks` (the current documents' `text_marks`) is given, hold exactly those documents. The rest
        is left out: the caller appends what the blocks lack and rewrites them."""
        stats = cls(**params)
        kept: list[_Block] = []
        end = 0
        for number in range(len(blocks)):
            raw = blocks.get(number)
            if raw is None:
                break
            try:
                block = _Block.from_bytes(bytes(raw))
            except ValueError as err:
                log.warning("bm25 statistics block %d is unreadable (%s): rebuilt from it on", number, err)
                break
            if block.start != end or block.count == 0:
                break
            if marks is not None and not np.array_equal(marks[end : end + block.count], block.marks):
                break
            kept.append(block)
            end += block.count
        tail = None
        if kept and kept[-1].count < stats.block_docs:
            try:
                tail = _Open.of(kept.pop())
            except ValueError as err:  # words that are not utf-8
                log.warning("bm25 statistics block %d is unreadable (%s): rebuilt from it on", len(kept), err)
        return cls(stats.k1, stats.b, stats.block_docs, kept, tail)
