"""A user's vectors in blocks of a few thousand rows, so that loading 100,000 of them is a few reads.

One block holds up to `block_size` (key, vector) entries of one model identity:

    header  <4s B B H I I I I>  magic b"LMVB", format version, dtype code (0: float32), 0, rows, width,
                                bytes of the keys, bytes of the model (version 1: 0)  (24 bytes, so the
                                matrix starts 8-byte aligned)
    matrix  rows x width little-endian float32, row-major
    keys    the keys in row order, UTF-8, separated by NUL
    model   (version 2) the identity of the model that made the vectors, UTF-8

`decode` reads the matrix in place (`np.frombuffer`, no copy). A change of layout gets a new version number;
a reader refuses versions it does not know instead of guessing.

Version 2 records the model in the block itself, so a block read under another model's name (a copy, a
bug, a hand-made move) is refused instead of handing a query another model's vectors: `decode(data, model)`
raises `ModelMismatch`, and `BlockEmbeddingCache` treats such a block as absent (its keys are embedded
again) and logs a warning once. Version 1 blocks, written before, record nothing: their name is their only
record, and they are read as before. Every block written now is version 2.

`BlockEmbeddingCache` is the embedding-cache interface the dense retriever uses (`get`, `put`, `keep_only`,
`close`, as lazymem.retrieval.embed_cache.EmbeddingCache) over a `Blocks` store. Between calls it keeps only
where each key is (block and row), not the vectors: the dense index holds its own copy of those.
"""

from __future__ import annotations

import logging
import struct
import threading
from collections.abc import Collection, Mapping, Sequence
from collections.abc import Set as AbstractSet
from typing import Protocol

import numpy as np

from lazymem.retrieval import per_user

log = logging.getLogger(__name__)

KIND = "vectors"
BLOCK_SIZE = 4096
VERSION = 2  # what `encode` writes when it is given the model (1: the model is not recorded)
_VERSIONS = (1, 2)
_MAGIC = b"LMVB"
_HEADER = struct.Struct("<4sBBHIIII")
_FLOAT32 = 0
_SEP = "\0"
# A block decoded: its keys and its matrix
_Decoded = tuple[list[str], np.ndarray]
# A position in the key map: block number << _SHIFT | row (one int per key instead of a tuple)
_SHIFT = 32
# (name read under, model recorded) pairs already logged: a mismatch is logged once per process
_WARNED: set[tuple[str, str]] = set()


class ModelMismatch(ValueError):
    """A block read under one model's name records that another model made its vectors."""

    def __init__(self, read_as: str, recorded: str):
        super().__init__(
            f"vector block: read as vectors of {read_as!r}, but it records the model {recorded!r}"
        )
        self.read_as, self.recorded = read_as, recorded


def encode(keys: Sequence[str], matrix: np.ndarray, model: str | None = None) -> bytes:
    """One block: `keys[i]` names row i of `matrix` (n x width, stored as little-endian float32); with
    `model`, a version-2 block that records the identity of the model that made the vectors."""
    matrix = np.ascontiguousarray(matrix, dtype="<f4")
    if matrix.ndim != 2 or matrix.shape[0] != len(keys):
        raise ValueError(f"vector block: {len(keys)} keys but a matrix of shape {matrix.shape}")
    if any(_SEP in key for key in keys):
        raise ValueError("vector block: a key contains NUL, which separates the keys")
    names = _SEP.join(keys).encode("utf-8")
    made_by = b"" if model is None else model.encode("utf-8")
    rows, width = matrix.shape
    version = 1 if model is None else VERSION
    header = _HEADER.pack(_MAGIC, version, _FLOAT32, 0, rows, width, len(names), len(made_by))
    return b"".join((header, matrix.tobytes(), names, made_by))


def decode(data: bytes | memoryview, model: str | None = None) -> tuple[list[str], np.ndarray]:
    """(keys, float32 matrix [rows, width]); the matrix is a read-only view of `data`. With `model` (the
    name the block is read under): ModelMismatch when the block records another model (a version-1
    block records none, and is taken as `model`'s)."""
    keys, matrix, recorded = decode_block(data)
    if model is not None and recorded is not None and recorded != model:
        raise ModelMismatch(model, recorded)
    return keys, matrix


def decode_block(data: bytes | memoryview) -> tuple[list[str], np.ndarray, str | None]:
    """(keys, matrix, the model the block records: None for a version-1 block)."""
    if len(data) < _HEADER.size:
        raise ValueError(f"vector block: {len(data)} bytes is shorter than its header")
    magic, version, dtype, _, rows, width, names, made_by = _HEADER.unpack_from(data)
    if magic != _MAGIC:
        raise ValueError("vector block: not a vector block (bad magic)")
    if version not in _VERSIONS or dtype != _FLOAT32:
        raise ValueError(f"vector block: format version {version}, dtype {dtype} is not known here")
    if version == 1:
        made_by = 0  # a field version 1 left at 0
    body = rows * width * 4
    expected = _HEADER.size + body + names + made_by
    if len(data) != expected:
        raise ValueError(f"vector block: {len(data)} bytes, but its header says {expected}")
    matrix = np.frombuffer(data, dtype="<f4", count=rows * width, offset=_HEADER.size).reshape(rows, width)
    start = _HEADER.size + body
    text = bytes(data[start : start + names]).decode("utf-8")
    keys = text.split(_SEP) if rows else []
    if len(keys) != rows:
        raise ValueError(f"vector block: {len(keys)} keys for {rows} rows")
    recorded = bytes(data[start + names :]).decode("utf-8") if version >= 2 else None
    return keys, matrix, recorded


def without(data: bytes, keys: AbstractSet[str]) -> bytes | None:
    """The block less the entries named in `keys`: `data` itself when it holds none of them, None when
    nothing is left. The rest keeps the model the block records (and its version)."""
    names, matrix, recorded = decode_block(data)
    keep = [i for i, key in enumerate(names) if key not in keys]
    if len(keep) == len(names):
        return data
    if not keep:
        return None
    return encode([names[i] for i in keep], matrix[keep], recorded)


class Blocks(per_user.Blocks, Protocol):
    """The user's blocks (`lazymem.retrieval.per_user.Blocks`: a SQLite file of the user's, or rows of the
    server database), able to list its names (which `BlockEmbeddingCache.keep_only` needs) and to tell its
    last block (so that a fresh cache's `put` reads one block, not all)."""

    def names(self, kind: str) -> list[str]:
        """Every name holding blocks of `kind`."""
        ...

    def last(self, kind: str, name: str) -> tuple[int, int] | None:
        """The highest block number of (kind, name) and that block's size in bytes, read without the block
        itself; None when it has no block."""
        ...


class _Model:
    """Where one model's keys are: key -> block << _SHIFT | row, and rows per block. `complete`: every block
    was read; else only the last ones (what a `put` needs), and a key not in `where` may still be stored.
    `mark`: the last block seen (number, size), which tells cheaply whether another writer added since."""

    def __init__(self, complete: bool = True) -> None:
        self.where: dict[str, int] = {}
        self.rows: dict[int, int] = {}
        self.complete = complete
        self.mark: tuple[int, int] | None = None

    def add(self, number: int, keys: Sequence[str], earlier: bool = False) -> None:
        """Learn block `number`'s keys. A key stored twice (two writers) counts at its first copy: one
        already known keeps its place, unless `earlier` says this block comes before every block known."""
        self.rows[number] = len(keys)
        base = number << _SHIFT
        if earlier:
            self.where.update(zip(keys, range(base, base + len(keys)), strict=True))
            return
        for row, key in enumerate(keys):
            self.where.setdefault(key, base | row)

    def saw(self, number: int, data: bytes) -> None:
        if self.mark is None or number >= self.mark[0]:
            self.mark = (number, len(data))


class BlockEmbeddingCache:
    """EmbeddingCache's interface over a user's vector blocks (kind "vectors", name = model identity).

    `get` of a model not seen yet reads all its blocks in one `read` and learns where every key is; later,
    present keys read only their blocks, and absent ones cost one cheap `last` unless another writer (an
    import, another replica) added blocks or rows since, which are then read. `put` appends to the
    model's last block until it holds `block_size` rows, then starts new ones, so it rewrites at most that
    one earlier block; it re-reads that block first (which also catches blocks another writer appended).
    A `put` before any `get` reads only the last block (an import opens a fresh cache per batch), so it may
    store again a key an earlier block holds: `get` then answers with the first copy, and `keep_only` and
    `without` drop every copy.
    The cache owns `blocks` and closes it. Returned vectors are read-only views into the blocks read.
    """

    def __init__(self, blocks: Blocks, block_size: int = BLOCK_SIZE):
        if block_size < 1:
            raise ValueError(f"block_size must be at least 1, got {block_size}")
        self.blocks = blocks
        self.block_size = block_size
        self.hits = self.misses = 0
        self.dropped = 0  # puts refused because the user's generation moved on
        self.foreign = 0  # blocks read under a model's name that record another model (ignored)
        self._models: dict[str, _Model] = {}
        self._lock = threading.RLock()  # the indexer thread and the event loop share a user's cache

    def get(self, model: str, keys: Sequence[str]) -> dict[str, np.ndarray]:
        """The stored vectors among `keys` (missing keys are absent)."""
        unique = list(dict.fromkeys(keys))
        with self._lock:
            known = self._models.get(model)
            if known is not None and known.complete and not self._current(model, known, unique):
                known = None  # its last block is gone (a deletion rewrote the blocks): read afresh
            if known is None or not known.complete:
                found = self._load(model, set(unique))[0]
            else:
                found = self._fetch(model, known, unique)
            self.hits += len(found)
            self.misses += len(unique) - len(found)
        return found

    def _current(self, model: str, known: _Model, keys: Sequence[str]) -> bool:
        """Learns what another writer appended when some of `keys` are unknown and the last block changed
        since it was seen. False when the last block seen is gone."""
        if all(key in known.where for key in keys) or self.blocks.last(KIND, model) == known.mark:
            return True
        return self._tail(model, known, None if known.mark is None else known.mark[0]) is not False

    def _load(self, model: str, wanted: AbstractSet[str]) -> tuple[dict[str, np.ndarray], _Decoded | None]:
        """Reads every block of `model` and learns where its keys are. Returns the vectors of the keys in
        `wanted`, and the last block decoded (None when there is none)."""
        known = _Model()
        found: dict[str, np.ndarray] = {}
        last = None
        for number, data in sorted(self.blocks.read(KIND, model).items(), reverse=True):
            block = self._decode(model, number, data)
            if known.mark is None:  # the last block: what a put appends to (none when it is another model's)
                last = block
                known.saw(number, data)
            if block is None:
                known.rows[number] = self.block_size  # its number is taken, and nothing is appended to it
                continue
            names, matrix = block
            known.add(number, names, earlier=True)
            if wanted:  # last block first: a key's earlier copy overwrites a later one
                found.update(zip(names, matrix, strict=True))
        self._models[model] = known
        if not found.keys() <= wanted:  # faster than filtering row by row when most keys are wanted
            found = {key: found[key] for key in wanted if key in found}
        return found, last

    def _fetch(self, model: str, known: _Model, keys: Sequence[str]) -> dict[str, np.ndarray]:
        spots = [(key, pos) for key in keys if (pos := known.where.get(key)) is not None]
        if not spots:
            return {}
        read = self.blocks.read(KIND, model, {pos >> _SHIFT for _, pos in spots})
        blocks = {number: self._decode(model, number, data) for number, data in read.items()}
        found = {}
        for key, pos in spots:
            block = blocks.get(pos >> _SHIFT)
            if block is None:
                continue  # deleted since (a forget elsewhere): a miss
            names, matrix = block
            row = pos & ((1 << _SHIFT) - 1)
            if row >= len(names) or names[row] != key:  # rewritten since: look it up afresh
                if key not in names:
                    continue
                row = names.index(key)
            found[key] = matrix[row]
        return found

    def put(self, model: str, items: dict[str, np.ndarray]) -> None:
        """Store the vectors not stored yet, in one `write`. A refused write stores nothing and forgets
        what this cache knew of the model (the next `get` reads it afresh)."""
        if not items:
            return
        with self._lock:
            known = self._models.get(model)
            if known is None:  # only its last block is read: a put needs no more
                known = self._models[model] = _Model(complete=False)
                mark = self.blocks.last(KIND, model)
                tail = self._tail(model, known, None if mark is None else mark[0])
            else:
                tail = self._tail(model, known, max(known.rows, default=None))
            if tail is False:  # its last block is gone (a deletion rewrote the blocks): start afresh
                tail = self._load(model, set())[1]
                known = self._models[model]
            fresh = [key for key in items if key not in known.where]
            if not fresh:
                return
            matrix = np.stack([np.asarray(items[key], dtype=np.float32).ravel() for key in fresh])
            last = max(known.rows, default=-1)
            keys_out, rows_out = list(fresh), matrix
            first = last + 1
            if tail is not None and tail[1].shape[1] != matrix.shape[1]:
                width, stored = matrix.shape[1], tail[1].shape[1]
                raise ValueError(f"vectors of {model!r}: width {width}, but the stored ones have {stored}")
            if tail is not None and known.rows[last] < self.block_size:
                names, old = tail
                keys_out, rows_out, first = names + keys_out, np.concatenate([old, matrix]), last
            written: dict[int, list[str]] = {}
            out: dict[int, bytes] = {}
            for start in range(0, len(keys_out), self.block_size):
                number = first + start // self.block_size
                written[number] = keys_out[start : start + self.block_size]
                out[number] = encode(written[number], rows_out[start : start + self.block_size], model)
            if not self.blocks.write(KIND, model, out):
                self.dropped += 1
                self._models.pop(model, None)
                return
            for number, names in written.items():
                known.add(number, names)
                known.saw(number, out[number])

    def _tail(self, model: str, known: _Model, last: int | None) -> _Decoded | None | bool:
        """(Re-)reads block `last` (None: there was none) and any written after it, learning their keys.
        Returns the (new) last block decoded, None when there is none, False when block `last` is gone."""
        last = -1 if last is None else last
        numbers = [0] if last < 0 else [last, last + 1]
        tail = None
        while True:
            read = self.blocks.read(KIND, model, numbers)
            if last >= 0 and numbers[0] == last and last not in read:
                return False
            for number in sorted(read):
                tail = self._decode(model, number, read[number])
                if tail is None:  # another model's: its number is taken, and nothing is appended to it
                    known.rows[number] = self.block_size
                else:
                    known.add(number, tail[0])
                known.saw(number, read[number])
            if numbers[-1] not in read:
                return tail
            last = numbers[-1]
            numbers = [last + 1]

    def _decode(self, model: str, number: int, data: bytes) -> _Decoded | None:
        """Block `number` of `model` decoded; None, counted in `foreign` and logged once, when it records
        another model: its vectors must never reach a query of `model`, so its keys count as absent (and
        are embedded again)."""
        try:
            return decode(data, model)
        except ModelMismatch as e:
            self.foreign += 1
            if (model, e.recorded) not in _WARNED:
                _WARNED.add((model, e.recorded))
                log.warning(
                    "vector block %d under %r records the model %r: ignored (its keys are embedded again)",
                    number,
                    model,
                    e.recorded,
                )
            return None

    def missing(self, model: str, keys: Collection[str]) -> set[str]:
        """The keys among `keys` that no block of `model` holds (what this cache knows, checked against
        the blocks' last one; read afresh when it knows less or the blocks were rewritten)."""
        wanted = list(dict.fromkeys(keys))
        with self._lock:
            known = self._models.get(model)
            if known is None or not known.complete or not self._current(model, known, wanted):
                self._load(model, set())
                known = self._models[model]
            return {key for key in wanted if key not in known.where}

    def models(self) -> list[str]:
        """The names that hold vector blocks."""
        return self.blocks.names(KIND)

    def drop_models(self, models: Collection[str]) -> bool:
        """Delete every block of `models`, one `write` each; False when a write was refused (the user's
        generation moved on: a deletion got there first)."""
        with self._lock:
            ok = True
            for model in models:
                self._models.pop(model, None)
                ok = self.blocks.write(KIND, model, {}, replace=True) and ok
            return ok

    def keep_only(self, dropped: Mapping[str, Collection[str]]) -> None:
        """Delete the blocks of every model not in `dropped`, and the keys `dropped` names from the others'
        blocks (rewriting only the blocks that held them)."""
        with self._lock:
            self._models.clear()  # rows move when a block is rewritten
            for model in self.blocks.names(KIND):
                if model not in dropped:
                    self.blocks.write(KIND, model, {}, replace=True)
                    continue
                gone = set(dropped[model])
                if not gone:
                    continue
                changes = {}
                for number, data in self.blocks.read(KIND, model).items():
                    rest = without(data, gone)
                    if rest is not data:
                        changes[number] = rest
                if changes:
                    self.blocks.write(KIND, model, changes)

    def close(self) -> None:
        with self._lock:
            self._models.clear()
            close = getattr(self.blocks, "close", None)
            if close is not None:
                close()
