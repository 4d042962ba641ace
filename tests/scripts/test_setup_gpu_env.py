"""The GPU nodes' RL environment (scripts/setup_gpu_env.sh rl): the pip commands it runs, with an
interpreter that stands in for Python and logs every call (nothing is installed; no GPU, no CUDA wheel).
flash-attn must come after VERL and its torch, built against them with --no-build-isolation, its build tools
first. Kind: the commands the set-up runs (the build itself needs nvcc and a GPU node)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from helpers import ROOT

FAKE_PYTHON = """#!{python}
import json, os, sys
from pathlib import Path
me, args = Path(sys.argv[0]), sys.argv[1:]
with open(os.environ["FAKE_PYTHON_LOG"], "a") as log:
    log.write(json.dumps(args) + "\\n")
if args[:2] == ["-m", "venv"]:
    (Path(args[-1]) / "bin").mkdir(parents=True, exist_ok=True)
    (Path(args[-1]) / "bin" / "python").symlink_to(me)
"""


def set_up(tmp_path, name: str) -> tuple[subprocess.CompletedProcess, list[list[str]]]:
    """Run scripts/setup_gpu_env.sh NAME with the stand-in Python; (its result, the pip installs it ran)."""
    fake = tmp_path / "python3"
    fake.write_text(FAKE_PYTHON.format(python=sys.executable))
    fake.chmod(0o755)
    log = tmp_path / "calls.jsonl"
    env = {**os.environ, "PYTHON": str(fake), "FAKE_PYTHON_LOG": str(log), "GPU_VENV_DIR": str(tmp_path)}
    cmd = ["bash", "scripts/setup_gpu_env.sh", name]
    out = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True)
    calls = [json.loads(line) for line in log.read_text().splitlines()]
    return out, [c[3:] for c in calls if c[:3] == ["-m", "pip", "install"]]


def test_the_rl_environment_builds_flash_attn_after_verl_without_build_isolation(tmp_path):
    out, installs = set_up(tmp_path, "rl")
    assert out.returncode == 0, out.stderr
    assert f"rl: {tmp_path}/.venv-gpu-rl/bin/python" in out.stdout
    verl = next(i for i, c in enumerate(installs) if "verl[vllm]==0.9.1" in c)
    (flash,) = [i for i, c in enumerate(installs) if "flash-attn==2.8.3" in c]
    assert verl < flash and "--no-build-isolation" in installs[flash]
    assert installs[flash][-3:-1] == ["-c", "constraints/gpu-rl.txt"]  # VERL's torch stays
    assert {"ninja", "packaging", "wheel", "setuptools"} <= set(installs[flash - 1])  # setup.py's imports
    assert not any("--no-build-isolation" in c for c in installs[:flash])
