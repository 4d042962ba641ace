"""The NVIDIA driver and CUDA compiler the GPU environments need, against what this node has.

A GPU environment's pins (constraints/gpu-NAME.txt) may hold, beside its torch pin, a line
``# cuda: driver>=D nvcc==M.*``: the RL environment's torch 2.11.0 wheel requires cuda-toolkit 13.0.2, so
the driver must be >= 580 (CUDA 13's minor-version compatibility) and flash-attn, built against that torch
by scripts/setup_gpu_env.sh, needs nvcc 13: torch's cpp_extension refuses an nvcc of another CUDA major
(torch/utils/cpp_extension.py:645-646 in the core environment's torch). ``lazymem doctor`` and
``make gpu-check`` compare them with ``nvidia-smi --query-gpu=driver_version --format=csv,noheader`` and
``nvcc --version`` (nvcc found as torch finds it: $CUDA_HOME or $CUDA_PATH, PATH, /usr/local/cuda;
cpp_extension.py:155-179). A node without nvidia-smi is not a GPU node: information, not a failure.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# torch's last guess for the CUDA toolkit (cpp_extension._find_cuda_home)
DEFAULT_CUDA_HOME = Path("/usr/local/cuda")
NOT_GPU = "not a GPU node (no nvidia-smi)"


@dataclass(frozen=True)
class CudaNeed:
    """What one GPU environment's constraints file asks of the node."""

    env: str  # the environment, e.g. .venv-gpu-rl
    torch: str  # its torch pin
    driver: tuple[int, ...] | None  # least driver version
    nvcc: int | None  # the CUDA major its nvcc must have


def _version(text: str) -> tuple[int, ...]:
    return tuple(int(x) for x in re.findall(r"\d+", text))


def needs(root: Path = ROOT) -> list[CudaNeed]:
    """Each constraints/gpu-NAME.txt's ``# cuda:`` line, with its torch pin."""
    found = []
    for path in sorted((root / "constraints").glob("gpu-*.txt")):
        text = path.read_text(encoding="utf-8")
        line = re.search(r"^#\s*cuda:(.*)$", text, re.M)
        if line is None:
            continue
        driver = re.search(r"driver>=([\d.]+)", line.group(1))
        nvcc = re.search(r"nvcc==(\d+)", line.group(1))
        torch = re.search(r"^torch==(\S+)", text, re.M)
        found.append(
            CudaNeed(
                f".venv-{path.stem}",
                torch.group(1) if torch else "?",
                _version(driver.group(1)) if driver else None,
                int(nvcc.group(1)) if nvcc else None,
            )
        )
    return found


def _run(cmd: list[str]) -> tuple[str | None, str]:
    """(stdout, '') of `cmd`, or (None, why it gave none)."""
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.SubprocessError) as e:
        return None, f"{cmd[0]} does not run ({type(e).__name__})"
    if out.returncode != 0:
        return None, f"{cmd[0]} failed: {(out.stderr or out.stdout).strip()[:200]}"
    return out.stdout, ""


def driver_version() -> tuple[str | None, str]:
    """(this node's NVIDIA driver version, '') or (None, why not)."""
    if not shutil.which("nvidia-smi"):
        return None, NOT_GPU
    out, why = _run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"])
    lines = [x.strip() for x in (out or "").splitlines() if x.strip()]
    return (lines[0], "") if lines else (None, why or "nvidia-smi lists no GPU")


def nvcc_version() -> tuple[str | None, str]:
    """(the CUDA release of the nvcc torch's extension builds would use, e.g. '13.0', its path) or (None,
    where it was looked for)."""
    home = os.environ.get("CUDA_HOME") or os.environ.get("CUDA_PATH")
    nvcc = Path(home) / "bin" / "nvcc" if home else None
    if nvcc is None:
        found = shutil.which("nvcc")
        nvcc = Path(found) if found else DEFAULT_CUDA_HOME / "bin" / "nvcc"
    if not nvcc.exists():
        return None, f"no nvcc ($CUDA_HOME, PATH, {DEFAULT_CUDA_HOME})"
    out, why = _run([str(nvcc), "--version"])
    release = re.search(r"release (\d+\.\d+)", out or "")
    return (release.group(1), str(nvcc)) if release else (None, why or f"{nvcc}: no release in its output")


def checks(flash_attn_built: bool, root: Path = ROOT) -> list[tuple[str, bool | None, str, str]]:
    """(name, ok, detail, fix) of the driver and of nvcc against every environment's needs. A missing or
    mismatched nvcc is information only once `flash_attn_built` (the RL environment imports flash_attn)."""
    wanted = needs(root)
    driver, why = driver_version()
    gpu_node = why != NOT_GPU
    rows = []
    floor = max(((n.driver, n) for n in wanted if n.driver), default=None, key=lambda x: x[0])
    if driver is None:
        rows.append(("NVIDIA driver", None if not gpu_node else False, why, "" if not gpu_node else why))
    elif floor is None:
        rows.append(("NVIDIA driver", None, f"{driver} (no constraints/gpu-*.txt names a least one)", ""))
    else:
        least, need = floor
        ok = _version(driver) >= least
        cuda = f" (CUDA {need.nvcc})" if need.nvcc else ""
        says = f">= {'.'.join(map(str, least))} for {need.env}'s torch {need.torch}{cuda}"
        fix = "" if ok else f"upgrade the NVIDIA driver to {says.removeprefix('>= ')}"
        rows.append(("NVIDIA driver", ok, f"{driver} ({says})", fix))
    for need in (n for n in wanted if n.nvcc is not None):
        release, where = nvcc_version()
        name = f"nvcc (flash-attn's build for {need.env})"
        if release is not None and _version(release)[0] == need.nvcc:
            rows.append((name, True, f"{release} ({where})", ""))
            continue
        detail = f"{release} ({where})" if release else where
        detail += f"; torch {need.torch} needs nvcc {need.nvcc}.x"
        if not gpu_node or flash_attn_built:
            done = NOT_GPU if not gpu_node else "flash_attn is built already"
            rows.append((name, None, f"{detail}: {done}", ""))
            continue
        fix = (
            f"install the CUDA {need.nvcc} toolkit and put its bin/ on PATH (or set CUDA_HOME), then "
            "bash scripts/setup_gpu_env.sh rl builds flash-attn"
        )
        rows.append((name, False, detail, fix))
    return rows


# what a Python's torch says of CUDA, as one JSON line
_TORCH_CUDA = (
    "import json, torch; print(json.dumps({'torch': torch.__version__, 'build': torch.version.cuda, "
    "'available': torch.cuda.is_available()}))"
)
# how each environment gets a CUDA torch (scripts/setup_env.sh and setup_sft_env.sh install the CPU build
# unless LAZYMEM_TORCH=cuda: scripts/env_cache.sh's torch_venv)
CUDA_FIX = {
    "core": "LAZYMEM_TORCH=cuda bash scripts/setup_env.sh (PyPI's CUDA build of torch==2.13.0 under .venv), "
    "and run the job with .venv's Python",
    "sft": "LAZYMEM_TORCH=cuda bash scripts/setup_sft_env.sh (PyPI's CUDA build of torch==2.13.0 in "
    ".venv-sft), or point train.sft.venv at an environment that has it",
    "rl": "bash scripts/setup_gpu_env.sh rl, then LAZYMEM_RL_PYTHON=.venv-gpu-rl/bin/python",
}


def torch_cuda(python: str) -> tuple[dict | None, str]:
    """({torch, build, available}, '') of `python`'s torch (build: torch.version.cuda, None for a CPU
    build; available: torch.cuda.is_available() there), or (None, why it could not be asked)."""
    out, why = _run([str(Path(python).expanduser()), "-c", _TORCH_CUDA])
    try:
        return json.loads((out or "").strip().splitlines()[-1]), ""
    except (ValueError, IndexError):
        return None, why or f"{python}: no answer from torch"


def cuda_torch_problem(python: str, runs: str, env: str) -> str | None:
    """Why `python`, which `runs` the named GPU work, cannot put it on a GPU (its torch is a CPU build, or
    does not reach the GPU), with the fix for the environment `env` (a key of :data:`CUDA_FIX`); None when
    it can. Asked only on a GPU node: elsewhere the missing GPU is the problem reported."""
    found, why = torch_cuda(python)
    if found is None:
        return f"{python} (runs {runs}): {why}; {CUDA_FIX[env]}"
    if found["available"]:
        return None
    state = "a CPU build" if found["build"] is None else f"built for CUDA {found['build']} but sees no GPU"
    return f"{python} (runs {runs}) has torch {found['torch']}, {state}: {CUDA_FIX[env]}"
