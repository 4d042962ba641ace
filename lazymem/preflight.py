"""Check, before any work starts, that a job has what it needs: GPU, model paths, data files, API keys,
and a GPU plan that fits the visible GPUs (lazymem.placement).

Everything missing is collected and reported in one message, each item with how to provide it, so a
misconfigured paper-scale job stops within seconds instead of failing an hour in.
"""

from __future__ import annotations

from pathlib import Path

from hydra.utils import instantiate

from lazymem.llm.backends import get_backend, has_gpu
from lazymem.llm.llm_set import role_config
from lazymem.methods.base import Method
from lazymem.placement import gpu_inventory, plan_problems


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


def problems(cfg, methods, benchmarks: dict) -> list[str]:
    found: list[str] = []
    gpu_needed_by: list[str] = []
    roles = roles_used(methods)
    for role in roles:
        rc = role_config(cfg.llm, role)
        where = f"llm.roles.{role}"
        backend = get_backend(rc)
        model_key = f"stages.{cfg.stage}" if role == "memory" and "stage" in cfg else None
        found += backend.problems(where, model_key)
        if backend.needs_gpu:
            gpu_needed_by.append(f"{where} ({backend.name})")
    if "retrieval" in cfg:  # weights load on first use: instantiating only reads the config
        retriever = instantiate(cfg.retrieval)
        found += retriever.problems("retrieval")
        gpu_needed_by += retriever.gpu_keys("retrieval")
    for name, data in benchmarks.items():
        if "path" not in (data.get("loader") or {}):
            continue  # generated data (synthetic) reads no file
        path = data.get("path")
        if not path:
            found.append(f"benchmarks.{name}.path is not set: pass benchmarks.{name}.path=/path/to/file.json")
        elif Path(path).is_dir():
            found.append(f"benchmarks.{name}.path = {path!r} is a folder: pass the benchmark's JSON file")
        elif not Path(path).is_file():
            found.append(f"benchmarks.{name}.path = {path!r} does not exist")
    if gpu_needed_by and not has_gpu():
        needed = ", ".join(gpu_needed_by)
        found.insert(
            0, f"no GPU found (nvidia-smi / torch.cuda), needed by {needed}; {_on_cpu(gpu_needed_by)}"
        )
    elif gpu_needed_by:
        found += plan_problems(cfg, gpu_inventory(), roles)
    return found


def _stop(missing: list[str]) -> None:
    if missing:
        lines = "\n".join(f"  - {m}" for m in missing)
        raise PreflightError(f"error: this job cannot start; missing:\n{lines}")


def require(cfg, methods, benchmarks: dict) -> None:
    _stop(problems(cfg, methods, benchmarks))


def require_placement(cfg, roles: list[str]) -> None:
    """For tasks without methods (coverage, build_sft, build_rl, reward_rollouts): their GPU plan fits the
    visible GPUs (nothing is checked where none is visible)."""
    _stop(plan_problems(cfg, gpu_inventory(), roles))
