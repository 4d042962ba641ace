"""Dense retrieval: a sentence-transformers bi-encoder, cosine similarity, cached message embeddings.

The encoder's `model` is named as lazymem/retrieval/weights.py says (bundled, a local directory or a hub
id), and loads on first use, so composing or instantiating a config never loads weights.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Sequence

import numpy as np

from lazymem.data.schema import Message
from lazymem.retrieval.base import Ranking, Retriever, check_template, render, template_fields, top_k
from lazymem.retrieval.embed_cache import EmbeddingCache, text_key
from lazymem.retrieval.per_user import PerUserRetriever, UserStorage
from lazymem.retrieval.weights import LazyModel, local_model_problems, on_gpu, resolve_device, resolve_model


class ModelChanged(RuntimeError):
    """A local model's files changed between the moment its identity was taken and its weights loaded:
    vectors stored under the identity would not be the loaded weights'."""


class SentenceEncoder(LazyModel):
    """Batch encoder returning L2-normalised float32 vectors (so a dot product is the cosine)."""

    def __init__(
        self,
        model: str = "bundled:all-minilm-l6-v2",
        device: str = "auto",
        batch_size: int = 64,
        max_seq_length: int | None = None,
        offline: bool = True,
        trust_remote_code: bool = False,
        model_kwargs: dict | None = None,
        cache_tag: str = "",
    ):
        self.model_spec = model
        self.device = device
        self.batch_size = batch_size
        self.max_seq_length = max_seq_length
        self.offline = offline
        self.trust_remote_code = trust_remote_code
        self.model_kwargs = dict(model_kwargs or {})
        self.path, source = resolve_model(model)
        self._source = source  # checked again when the weights load (ModelChanged)
        # Anything that changes the vectors for the same text belongs in the cache identity.
        parts = [source, f"max_len={max_seq_length}"]
        if self.model_kwargs:
            parts.append("kwargs=" + json.dumps(self.model_kwargs, sort_keys=True, default=str))
        if cache_tag:
            parts.append(f"tag={cache_tag}")
        self.identity = "|".join(parts)
        self._width: int | None = None

    def _load(self):
        self._check_unchanged()
        from sentence_transformers import SentenceTransformer

        model = SentenceTransformer(
            self.path,
            device=resolve_device(self.device),
            local_files_only=self.offline,
            trust_remote_code=self.trust_remote_code,
            model_kwargs=self.model_kwargs or None,
        )
        if self.max_seq_length is not None:
            model.max_seq_length = self.max_seq_length
        return model

    def _check_unchanged(self) -> None:
        """A local model's identity holds a fingerprint of its files taken when this encoder was made; the
        weights load later (first use). Files replaced in between would make vectors of other weights under
        that identity: refused, loudly, until the process starts again (and takes the new identity)."""
        if not self._source.startswith("path:"):
            return
        now = resolve_model(self.model_spec)[1]
        if now != self._source:
            raise ModelChanged(
                f"the model directory {self.path} changed after this process named its vectors "
                f"({self._source} -> {now}): restart it, so that they are stored under the new identity"
            )

    @property
    def width(self) -> int:
        """How many values its vectors have (measured on one text: what `encode` returns is the truth)."""
        if self._width is None:
            self._width = int(self.encode(["width"]).shape[1])
        return self._width

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        if not texts:
            return np.zeros((0, 0), dtype=np.float32)
        vecs = self.model.encode(
            list(texts),
            batch_size=self.batch_size,
            normalize_embeddings=True,
            convert_to_numpy=True,
            show_progress_bar=False,
        )
        return np.asarray(vecs, dtype=np.float32)


class DenseIndex:
    """Message embeddings of one history. `search` ranks positions in the list it was built on."""

    def __init__(
        self,
        matrix: np.ndarray,
        encoder: SentenceEncoder,
        query_template: str,
        embedded: int,
        rows: _Rows | None = None,
    ):
        self.matrix = matrix
        self.rows = rows  # the buffer `matrix` is a view of, with spare rows to grow into (extend)
        self.encoder = encoder
        self.query_template = query_template
        self.embedded = embedded  # texts this build had to encode (0 when all came from the cache)

    def scores(self, query: str) -> np.ndarray:
        if self.matrix.shape[0] == 0:
            return np.zeros(0, dtype=np.float32)
        q = self.encoder.encode([self.query_template.format(query=query)])[0]
        return self.matrix @ q

    def search(self, query: str, k: int | None = None) -> Ranking:
        return top_k(self.scores(query), k)


class _Rows:
    """A matrix with spare rows below the `used` ones: an index grown once per add writes the new vectors
    there instead of copying every row (at 100,000 messages the copy took about 50 ms of a query). Each
    index grown from it keeps a view of the rows it had, which a later growth never overwrites."""

    def __init__(self, array: np.ndarray, used: int):
        self.array, self.used = array, used

    @classmethod
    def after(cls, index: DenseIndex, new: np.ndarray) -> _Rows:
        """`index.matrix` followed by `new`: in its buffer's spare rows when `index` is the buffer's newest
        index and they suffice, else in a new buffer with about an eighth spare."""
        n, k = index.matrix.shape[0], new.shape[0]
        rows = index.rows
        if rows is None or rows.used != n or rows.array.shape[0] < n + k:
            array = np.empty((n + k + cls.room(n + k), index.matrix.shape[1]), dtype=np.float32)
            array[:n] = index.matrix
            rows = cls(array, n)
        rows.array[n : n + k] = new
        rows.used = n + k
        return rows

    @staticmethod
    def room(n: int) -> int:
        """Spare rows for a matrix of `n`: an eighth, at least 1,024."""
        return max(1024, n // 8)

    def view(self) -> np.ndarray:
        return self.array[: self.used]


class DenseRetriever(Retriever, PerUserRetriever):
    """Embeds messages (through the cache) and builds a `DenseIndex` per history.

    `template` renders each message for the encoder; `query_template` wraps the question (`{query}`),
    e.g. with the instruction prefix instruction-tuned embedders expect. Missing embeddings are encoded
    shortest-first in chunks of `commit_every` texts, each chunk committed to the cache on its own.

    For the agent memory it implements the per-user port (lazymem/retrieval/per_user.py): each user gets
    the same encoder with an embedding cache of their own, and an index grows by the new messages' rows.
    """

    name = "dense"

    def __init__(
        self,
        encoder: SentenceEncoder,
        cache: EmbeddingCache | None = None,
        template: str = "{text}",
        query_template: str = "{query}",
        commit_every: int = 256,
    ):
        if "{query}" not in query_template:
            raise ValueError(f"query_template must contain '{{query}}': {query_template!r}")
        self.encoder = encoder
        self.cache = cache
        self.template = check_template(template)
        self.query_template = query_template
        self.commit_every = commit_every
        self.grows = False  # True for a per-user form: its index is built with spare rows (see _Rows)
        self.embedded_total = 0  # texts encoded by this retriever so far (cache misses that were filled)

    def for_user(self, storage: UserStorage) -> DenseRetriever:
        """The same encoder (one copy in memory) with the user's own embedding cache in `storage`."""
        if self.cache is None:
            return self
        mine = copy.copy(self)
        mine.cache = storage.embedding_cache()
        mine.grows = True  # its index grows after each add (`extend`): built with rows to spare
        return mine

    def close(self) -> None:
        if self.cache is not None:
            self.cache.close()

    def problems(self, where: str) -> list[str]:
        return local_model_problems(self.encoder.model_spec, f"{where}.encoder.model")

    def gpu_keys(self, where: str) -> list[str]:
        return [f"{where}.encoder.device"] if on_gpu(self.encoder.model_spec, self.encoder.device) else []

    def embed(self, texts: Sequence[str], room: int = 0) -> tuple[np.ndarray, int]:
        """Vectors for `texts` in order, and how many had to be encoded; with `room`, the matrix is the
        first rows of a buffer with `room` rows more (to grow into)."""
        keys = [text_key(t) for t in texts]
        model_id = self.encoder.identity
        known = self.cache.get(model_id, keys) if self.cache is not None else {}
        todo = {k: t for k, t in zip(keys, texts, strict=True) if k not in known}
        pending = sorted(todo.items(), key=lambda kv: len(kv[1]))
        for start in range(0, len(pending), self.commit_every):
            chunk = pending[start : start + self.commit_every]
            vecs = self.encoder.encode([t for _, t in chunk])
            fresh = {k: v for (k, _), v in zip(chunk, vecs, strict=True)}
            known.update(fresh)
            if self.cache is not None:
                self.cache.put(model_id, fresh)
        self.embedded_total += len(todo)
        if not texts:
            return np.zeros((0, 0), dtype=np.float32), 0
        vectors = [known[k] for k in keys]
        if not room:
            return np.stack(vectors), len(todo)
        buffer = np.empty((len(keys) + room, vectors[0].shape[0]), dtype=np.float32)
        np.stack(vectors, out=buffer[: len(keys)])
        return buffer[: len(keys)], len(todo)

    def warm(self, messages: Sequence[Message]) -> int:
        """Embed the messages the cache lacks (only useful with a cache: the per-user form has one)."""
        if self.cache is None:
            return 0
        return self.embed([self.render(m) for m in messages])[1]

    def vector_keys(self, messages: Sequence[Message]) -> dict[str, set[str]] | None:
        """None when the template uses `{idx}`: a message's position moves when an earlier one is
        deleted, so the key it was stored under cannot be told from the message alone."""
        if self.cache is None:
            return {}  # its per-user form is itself: it stores nothing
        if "idx" in template_fields(self.template):
            return None
        return {self.encoder.identity: {text_key(self.render(m)) for m in messages}}

    def vector_width(self, model: str) -> int | None:
        if self.cache is None or model != self.encoder.identity:  # as vector_keys: it stores none
            return None
        return self.encoder.width

    def render(self, message: Message) -> str:
        """The text this retriever embeds for a message."""
        return render(message, self.template)

    def embed_query(self, query: str) -> np.ndarray:
        """The query's vector (wrapped in `query_template`), comparable with `embed`'s rows."""
        return self.encoder.encode([self.query_template.format(query=query)])[0]

    def build(self, messages: Sequence[Message]) -> DenseIndex:
        if not self.grows or not messages:
            matrix, embedded = self.embed([self.render(m) for m in messages])
            return DenseIndex(matrix, self.encoder, self.query_template, embedded)
        matrix, embedded = self.embed([self.render(m) for m in messages], _Rows.room(len(messages)))
        rows = _Rows(matrix.base, matrix.shape[0])
        return DenseIndex(matrix, self.encoder, self.query_template, embedded, rows)

    def extend(self, index: DenseIndex, messages: Sequence[Message]) -> DenseIndex | None:
        """The earlier rows and the new messages' vectors: at 100,000 messages, reading every vector back
        from the cache took about 2 s of a 4 s build."""
        if index.matrix.shape[0] == 0:  # built on no message: no width to stack onto
            return None
        if not messages:
            return index
        matrix, embedded = self.embed([self.render(m) for m in messages])
        rows = _Rows.after(index, matrix)
        return DenseIndex(rows.view(), self.encoder, self.query_template, embedded, rows)
