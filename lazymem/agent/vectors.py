"""Embedding vectors that travel with a user's export, so that moving a user to another store (SQLite to
PostgreSQL, one deployment to the next) does not embed their history again: that took 22.7 min per
100,000 messages on two cores.

An export with vectors gives each message a `vectors` field, `{model identity: {key: base64}}`: the
entries of the user's embedding cache that the retrievers derived from that message (their
`PerUserRetriever.vector_keys`), each a little-endian float32 vector. An import keeps a carried vector only
where the target's retriever would store that very entry: the same model identity (which names the weights,
their version and settings) and the same key (sha256 of the exact text the encoder read, so the same
template). Anything else is ignored, and embedded as usual when the user is indexed. A kept vector must
have the encoder's width and unit length (every encoder here normalises its vectors), else the import is
refused before anything of its batch is stored.
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol

import numpy as np

from lazymem.agent.inputs import BadInput
from lazymem.data.schema import Message

# Keys per lookup in the user's embedding cache
_CHUNK = 1000
# How far a carried vector's length may be from 1 (float32 rounding of a normalised vector is ~1e-7)
_NORM_TOLERANCE = 1e-3

# A message's vectors as an export carries them: {model identity: {key: base64 of float32}}
Carried = dict[str, dict[str, str]]


class VectorRetriever(Protocol):
    """What this module asks of the agent's retrieval (`lazymem.agent.user_retrieval.UserRetrieval`, which
    asks its entries with the per-user port, `lazymem.retrieval.per_user.PerUserRetriever`)."""

    def vector_keys(self, messages: Sequence[Message]) -> dict[str, set[str]] | None: ...

    def vector_width(self, model: str) -> int | None: ...


class VectorCache(Protocol):
    """A user's embedding cache (EmbeddingCache, or its rows on a server database)."""

    def get(self, model: str, keys: Sequence[str]) -> dict[str, np.ndarray]: ...

    def put(self, model: str, items: dict[str, np.ndarray]) -> None: ...


def encode(vector: np.ndarray) -> str:
    return base64.b64encode(np.asarray(vector, dtype="<f4").tobytes()).decode("ascii")


def decode(where: str, text: Any) -> np.ndarray:
    """A carried vector, or BadInput naming `where`."""
    if not isinstance(text, str):
        raise BadInput(f"{where}: a vector must be a base64 string")
    try:
        raw = base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError):
        raise BadInput(f"{where}: not base64") from None
    if not raw or len(raw) % 4:
        raise BadInput(f"{where}: {len(raw)} bytes is not a whole number of float32 values")
    return np.frombuffer(raw, dtype="<f4").astype(np.float32)


def for_export(
    retriever: VectorRetriever, cache: VectorCache, messages: Sequence[Message]
) -> list[Carried | None]:
    """Each message's vectors in the user's cache (None where it has none, e.g. not indexed yet)."""
    own = [retriever.vector_keys([m]) or {} for m in messages]
    wanted: dict[str, list[str]] = {}
    for keys in own:
        for model, found in keys.items():
            wanted.setdefault(model, []).extend(found)
    stored: dict[str, dict[str, np.ndarray]] = {}
    for model, keys in wanted.items():
        unique = list(dict.fromkeys(keys))
        stored[model] = {}
        for start in range(0, len(unique), _CHUNK):
            stored[model].update(cache.get(model, unique[start : start + _CHUNK]))
    out: list[Carried | None] = []
    for keys in own:
        carried = {
            model: {key: encode(stored[model][key]) for key in sorted(found) if key in stored[model]}
            for model, found in keys.items()
        }
        carried = {model: vectors for model, vectors in carried.items() if vectors}
        out.append(carried or None)
    return out


def for_import(
    retriever: VectorRetriever,
    messages: Sequence[Message],
    carried: Sequence[Any],
    where: Callable[[int], str],
) -> dict[str, dict[str, np.ndarray]]:
    """The carried vectors (`carried[i]`: messages[i]'s `vectors` field, or None) that the target's retriever
    would store for these messages, by model and key, checked; `where(i)` names message i in an error.
    Raises BadInput on a malformed field or a vector of the wrong width or length."""
    widths: dict[str, int | None] = {}
    kept: dict[str, dict[str, np.ndarray]] = {}
    for i, (message, field) in enumerate(zip(messages, carried, strict=True)):
        if field is None:
            continue
        if not isinstance(field, Mapping):
            raise BadInput(f"{where(i)}: vectors must be an object {{model: {{key: base64}}}}")
        own = None
        for model, vectors in field.items():
            if not isinstance(vectors, Mapping):
                raise BadInput(f"{where(i)}: vectors[{model!r}] must be an object {{key: base64}}")
            for key, text in vectors.items():
                vector = decode(f"{where(i)}: vectors[{model!r}][{key!r}]", text)
                if own is None:
                    own = retriever.vector_keys([message]) or {}
                if key not in own.get(model, ()):
                    continue  # another encoder or template than the target's: embedded anew
                if model not in widths:
                    widths[model] = retriever.vector_width(model)
                _check(f"{where(i)}: vectors[{model!r}][{key!r}]", vector, widths[model])
                kept.setdefault(model, {})[key] = vector
    return kept


def _check(where: str, vector: np.ndarray, width: int | None) -> None:
    if width is not None and vector.shape[0] != width:
        raise BadInput(f"{where}: {vector.shape[0]} values, but the encoder makes {width}")
    norm = float(np.linalg.norm(vector))
    if not abs(norm - 1.0) <= _NORM_TOLERANCE:  # also refuses NaN and infinity
        raise BadInput(f"{where}: length {norm:.4g}, but the encoder's vectors have length 1")
