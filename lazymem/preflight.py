"""Check, before any work starts, that a job has what it needs: GPU, model paths, data files, API keys.

Everything missing is collected and reported in one message, each item with how to provide it, so a
misconfigured paper-scale job stops within seconds instead of failing an hour in.
"""

from __future__ import annotations

import os
from pathlib import Path

from omegaconf import OmegaConf

from lazymem.llm.roles import has_gpu, role_config


class PreflightError(SystemExit):
    pass


def roles_used(methods) -> list[str]:
    roles = {"answer", "judge"}
    for m in methods:
        for attr in ("processor", "role"):
            if isinstance(getattr(m, attr, None), str):
                roles.add(getattr(m, attr))
    return sorted(roles)


def problems(cfg, methods, benchmarks: dict) -> list[str]:
    found: list[str] = []
    gpu_needed_by: list[str] = []
    for role in roles_used(methods):
        rc = role_config(cfg.llm, role)
        where = f"llm.roles.{role}"
        if rc["backend"] != "endpoint" and not rc.get("model"):
            how = f"stages.{cfg.stage}" if role == "memory" and "stage" in cfg else f"{where}.model"
            found.append(f"{where}.model is not set: pass {how}=... (a model directory or a GGUF)")
            continue
        if rc["backend"] == "vllm":
            gpu_needed_by.append(f"{where} (vLLM)")
            model = str(rc["model"])
            if not Path(model).expanduser().is_dir():
                found.append(
                    f"{where}.model = {model!r} is not a local model directory: download it and pass "
                    f"{where}.model=/path/to/model (or set it in conf/local/, see conf/local/README.md)"
                )
        if rc["backend"] == "endpoint":
            if not rc.get("base_url"):
                found.append(f"{where}.base_url is not set")
            env = rc.get("api_key_env")
            if env and not os.environ.get(env):
                found.append(
                    f"{where} needs an API key: export {env}=... (it is read from the environment only)"
                )
    retrieval = OmegaConf.to_container(cfg.retrieval, resolve=True)
    encoder = ((retrieval.get("retrievers") or {}).get("dense") or {}).get("encoder") or {}
    reranker = retrieval.get("reranker") or {}
    for key, spec in (
        ("retrieval.retrievers.dense.encoder.model", encoder.get("model")),
        ("retrieval.reranker.model", reranker.get("model")),
    ):
        if spec and not str(spec).startswith("bundled:") and not Path(str(spec)).expanduser().is_dir():
            found.append(f"{key} = {spec!r} is not a local model directory: pass {key}=/path/to/model")
        if (
            spec
            and not str(spec).startswith("bundled:")
            and encoder.get("device", "auto") in ("cuda", "auto")
        ):
            gpu_needed_by.append(key)
    for name, data in benchmarks.items():
        if "path" not in (data.get("loader") or {}):
            continue  # generated data (synthetic) reads no file
        path = data.get("path")
        if not path:
            found.append(f"benchmarks.{name}.path is not set: pass benchmarks.{name}.path=/path/to/file.json")
        elif not Path(path).is_file():
            found.append(f"benchmarks.{name}.path = {path!r} does not exist")
    if gpu_needed_by and not has_gpu():
        found.insert(
            0,
            "no GPU found (nvidia-smi / torch.cuda), needed by "
            + ", ".join(gpu_needed_by)
            + "; on a CPU machine use llm=cpu (e.g. +experiment=main_table_cpu)",
        )
    return found


def require(cfg, methods, benchmarks: dict) -> None:
    missing = problems(cfg, methods, benchmarks)
    if missing:
        lines = "\n".join(f"  - {m}" for m in missing)
        raise PreflightError(f"error: this job cannot start; missing:\n{lines}")
