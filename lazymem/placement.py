"""GPU placement: check, before a job starts, that its GPU plan fits the GPUs it can see.

A plan (``conf/placement/*.yaml``, docs/gpu-placement.md) sets each component's own device keys: a vLLM
server's ``gpus`` (its CUDA_VISIBLE_DEVICES), ``tensor_parallel_size``, ``data_parallel_size`` and
``gpu_memory_utilization``, the dense encoder's ``device`` and the reranker's ``devices``. Each model's
memory is estimated from its directory (:mod:`lazymem.model_memory`), and a plan is refused when a server's
share cannot hold its model or a GPU is promised more than it has. vLLM reserves ``gpu_memory_utilization``
x the GPU's total memory when it starts (and will not start unless that much is free), so a server counts
for its whole share; the encoder and the reranker count for their weights plus a margin.
"""

from __future__ import annotations

import logging
import math
import os
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

from omegaconf import OmegaConf

from lazymem.llm.backends import Backend, get_backend
from lazymem.llm.cache import canonical_json
from lazymem.llm.llm_set import role_config, to_dict
from lazymem.model_memory import kv_gib, model_gib

log = logging.getLogger(__name__)

# per GPU of a vLLM server, beside its weights and KV cache: activations, CUDA graphs, the CUDA context
VLLM_OVERHEAD_GIB = 2.0
# the KV cache a server must hold when its model's config does not say (else: one max_model_len sequence,
# which vLLM needs before it starts)
MIN_KV_GIB = 1.0
# the dense encoder's and the reranker's CUDA context and the activations of one batch
TORCH_OVERHEAD_GIB = 2.0
# GPU counts of the shipped plans conf/placement/gpuN.yaml, and the GPU memory they are sized for
SHIPPED, SHIPPED_GIB = (1, 2, 4, 8), 80
# a GPU sold as N GB counts as N GiB when it shows this share of it (an H100 80GB shows 79.6 GiB)
SIZE_SLACK = 0.95
# the largest gpu_memory_utilization a fix suggests: beyond it a server needs more GPUs, not more share
MAX_UTIL = 0.95


class Gpu(NamedTuple):
    index: int
    total_gib: float
    free_gib: float


def gpu_inventory() -> list[Gpu]:
    """The GPUs this process may use (nvidia-smi, in CUDA_VISIBLE_DEVICES order when that lists indices);
    [] without nvidia-smi or when it fails."""
    if not shutil.which("nvidia-smi"):
        return []
    query = ["nvidia-smi", "--query-gpu=index,memory.total,memory.free", "--format=csv,noheader,nounits"]
    try:
        out = subprocess.run(query, capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.SubprocessError):
        return []
    gpus = {}
    for line in out.stdout.splitlines() if out.returncode == 0 else []:
        try:
            index, total, free = (float(x) for x in line.split(","))
        except ValueError:
            continue
        gpus[int(index)] = Gpu(int(index), total / 1024, free / 1024)  # nvidia-smi reports MiB
    wanted = [w.strip() for w in os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",") if w.strip()]
    if "CUDA_VISIBLE_DEVICES" in os.environ and all(w.isdigit() for w in wanted):
        return [gpus[int(w)] for w in wanted if int(w) in gpus]
    return [gpus[i] for i in sorted(gpus)]


@dataclass
class Tenant:
    """One model on the GPUs: where it is, what it takes on each of its GPUs and what it needs there."""

    what: str  # for messages, e.g. "vLLM server qwen3-32b (Qwen3-32B)"
    key: str  # the config key that places it
    devices: list[int]  # GPU indices as in the inventory
    count: int  # GPUs it takes (for the job's total need)
    need: float  # least GiB per GPU: weights (their share) + overhead + KV cache
    weights: float | None  # GiB of weights per GPU; None: unknown
    util: float | None = None  # vLLM's share of each GPU; None: takes `need`
    util_key: str = ""

    def takes(self, gpu: Gpu) -> float:
        return self.util * gpu.total_gib if self.util is not None else self.need


def _weights(what: str, model: str, dtype) -> float | None:
    gib = model_gib(model, dtype)
    if gib is None:
        log.warning("placement: cannot estimate the memory of %s from %r: weights not counted", what, model)
    return gib


def _vllm_key(llm: dict, role: str, name: str) -> str:
    own = ((llm.get("roles") or {}).get(role) or {}).get("vllm") or {}
    return f"llm.roles.{role}.vllm.{name}" if name in own else f"llm.common.vllm.{name}"


def _servers(cfg, roles: list[str], visible: list[Gpu], found: list[str]) -> list[Tenant]:
    """The job's distinct vLLM servers on GPUs (roles with equal server specs share one)."""
    llm = to_dict(cfg.llm)
    groups: dict[str, tuple[list[str], Backend]] = {}
    for role in roles:
        try:
            backend = get_backend(role_config(llm, role)).resolve()
        except (KeyError, ValueError):
            continue  # preflight names what is wrong with the role itself
        if backend.name == "vllm" and backend.needs_gpu:
            groups.setdefault(canonical_json(backend.server_spec()), ([], backend))[0].append(role)
    tenants = []
    for served, backend in groups.values():
        o, role = backend.options, served[0]
        tp, dp = int(o.get("tensor_parallel_size") or 1), int(o.get("data_parallel_size") or 1)
        what = f"vLLM server {backend.served_name} ({Path(backend.model).name}; roles {', '.join(served)})"
        gpus_key = _vllm_key(llm, role, "gpus")
        if o.get("gpus") is None:  # CUDA_VISIBLE_DEVICES inherited: vLLM takes the first GPUs
            devices = [g.index for g in visible[: tp * dp]]
        else:
            devices = [int(d) for d in str(o["gpus"]).split(",") if d.strip().isdigit()]
        if len(devices) != tp * dp:
            found.append(
                f"{what} needs tensor_parallel_size {tp} x data_parallel_size {dp} = {tp * dp} GPUs but "
                f"{gpus_key} = {o.get('gpus')!r} gives it {len(devices)}: make them agree"
            )
        weights = _weights(what, backend.model, o.get("dtype"))
        kv = kv_gib(backend.model, o.get("max_model_len"), o.get("dtype"))
        share = (weights or 0.0) / tp
        need = share + VLLM_OVERHEAD_GIB + (MIN_KV_GIB if kv is None else kv / tp)
        util = float(o.get("gpu_memory_utilization") or 0.9)  # unset: vLLM's default
        util_key = _vllm_key(llm, role, "gpu_memory_utilization")
        tenants.append(Tenant(what, gpus_key, devices, tp * dp, need, share, util, util_key))
    return tenants


def _torch_devices(spec, visible: list[Gpu]) -> tuple[list[int], list[str]]:
    """(GPU indices, names not visible) of a torch device spec: cuda:K is the K-th visible GPU, auto/cuda
    the first, null (FlagEmbedding's default) every one; cpu is none."""
    if spec is None:
        return [g.index for g in visible], []
    devices, missing = [], []
    for name in map(str, spec if isinstance(spec, list) else [spec]):
        if name in ("auto", "cuda"):
            name = "cuda:0"
        if not name.removeprefix("cuda:").isdigit():
            continue  # cpu, mps
        k = int(name.removeprefix("cuda:"))
        if k < len(visible):
            devices.append(visible[k].index)
        else:
            missing.append(name)
    return devices, missing


def _retrieval(cfg, visible: list[Gpu], found: list[str]) -> list[Tenant]:
    """The dense encoders and the reranker on GPUs (bundled CPU models are not placed)."""
    retrieval = OmegaConf.to_container(cfg.retrieval, resolve=True) if "retrieval" in cfg else {}
    parts = []
    for name, retriever in (retrieval.get("retrievers") or {}).items():
        enc = (retriever or {}).get("encoder") or {}
        kwargs = enc.get("model_kwargs") or {}
        dtype = kwargs.get("dtype") or kwargs.get("torch_dtype")  # sentence-transformers loads float32 else
        key = f"retrieval.retrievers.{name}.encoder.device"
        parts.append((f"the {name} encoder", key, enc.get("model"), enc.get("device", "auto"), dtype))
    rr = retrieval.get("reranker") or {}
    if "devices" in rr:  # FlagReranker (BGE)
        dtype = "float16" if rr.get("use_fp16", True) else "float32"
        key = "retrieval.reranker.devices"
        parts.append(("the reranker", key, rr.get("model"), rr.get("devices"), dtype))
    tenants = []
    for label, key, model, spec, dtype in parts:
        if not model or str(model).startswith("bundled:"):
            continue
        what = f"{label} ({Path(str(model)).name})"
        devices, missing = _torch_devices(spec, visible)
        if missing:
            found.append(f"{key} = {spec!r}: {', '.join(missing)} is not visible ({len(visible)} GPUs)")
        if devices or missing:
            weights = _weights(what, str(model), dtype)
            tenants.append(Tenant(what, key, devices, 1, (weights or 0.0) + TORCH_OVERHEAD_GIB, weights))
    return tenants


def _plan_for(n: int) -> int:
    """The smallest shipped plan with at least n GPUs."""
    return next((k for k in SHIPPED if k >= n), SHIPPED[-1])


def _largest_plan(visible: int) -> int:
    """The largest shipped plan that `visible` GPUs can run."""
    return max((k for k in SHIPPED if k <= visible), default=SHIPPED[0])


def _listed(tenants: list[Tenant], gpu: Gpu | None = None) -> str:
    return "; ".join(f"{t.what}: {t.takes(gpu) if gpu else t.need * t.count:.1f} [{t.key}]" for t in tenants)


def _at_least(tenants: list[Tenant], size: float, visible: int, name: str, used: int) -> str | None:
    """The job's least total need, when it takes more GPUs of `size` GiB than are visible or than plan
    `name` uses (`used` of them)."""
    total = sum(t.need * t.count for t in tenants)
    n = math.ceil(total / size)
    if n <= min(visible, used):
        return None
    head = (
        f"this job's models need at least {total:.0f} GiB of GPU memory ({_listed(tenants)}), "
        f"so at least {n} GPUs of {size:.0f} GiB"
    )
    fix = f"pass placement=gpu{_plan_for(n)}"
    if size < SIZE_SLACK * SHIPPED_GIB:
        fix = "write a plan for these GPUs (docs/gpu-placement.md)"
    if n > visible:
        return f"{head}; {visible} visible: run it on a node with {n} GPUs and {fix}"
    return f"{head}; placement={name} uses {used}: {fix}"


def _share_problem(t: Tenant, gpus: dict[int, Gpu]) -> str | None:
    """A vLLM server whose share of a GPU cannot hold its model, with the fix."""
    gpu = min((gpus[d] for d in t.devices if d in gpus), key=lambda g: g.total_gib, default=None)
    if gpu is None or t.util is None or t.weights is None or t.need <= t.takes(gpu):
        return None
    util = math.ceil(t.need / gpu.total_gib * 100) / 100
    more = "split it over more GPUs (tensor_parallel_size, and as many in gpus) or use a plan with more GPUs"
    fix = (
        f"pass {t.util_key}={util:.2f}, or {more}" if util <= MAX_UTIL else f"it does not fit one GPU: {more}"
    )
    return (
        f"{t.what} needs about {t.need:.1f} GiB per GPU ({t.weights:.1f} of weights, the rest KV cache "
        f"and activations) but gpu_memory_utilization {t.util:g} gives it {t.takes(gpu):.1f} of GPU "
        f"{gpu.index}'s {gpu.total_gib:.1f} GiB: {fix}"
    )


def _device_problem(gpu: Gpu, on: list[Tenant]) -> str | None:
    """A GPU promised more than it has (or than is free), naming each tenant, with the fix."""
    planned = sum(t.takes(gpu) for t in on)
    if planned <= gpu.free_gib:
        return None
    if planned <= gpu.total_gib:
        return (
            f"GPU {gpu.index} has {gpu.free_gib:.1f} of {gpu.total_gib:.1f} GiB free but the plan needs "
            f"{planned:.1f} ({_listed(on, gpu)}): other processes hold the rest (nvidia-smi lists them)"
        )
    fix = "move a model to another GPU (the key in brackets), or use a plan with more GPUs"
    servers = sorted((t for t in on if t.util is not None), key=lambda t: t.takes(gpu))
    if servers:
        big = servers[-1]
        util = math.floor((gpu.total_gib - planned + big.takes(gpu)) / gpu.total_gib * 100) / 100
        if util * gpu.total_gib >= big.need:
            fix = f"pass {big.util_key}={util:.2f}, or {fix}"
    return (
        f"GPU {gpu.index} is over-subscribed: {planned:.1f} GiB planned of {gpu.total_gib:.1f} "
        f"({_listed(on, gpu)}): {fix}"
    )


def plan_problems(cfg, inventory: list[Gpu], roles: list[str]) -> list[str]:
    """What keeps the job's GPU plan (``cfg.placement`` and the components' device keys) from fitting the
    GPUs in ``inventory``, each with its fix; [] when it fits or no GPU is visible."""
    if not inventory:
        return []
    plan = cfg.get("placement") or {}
    name, wanted, visible = plan.get("name", "none"), int(plan.get("gpus") or 0), len(inventory)
    found: list[str] = []
    tenants = _servers(cfg, roles, inventory, found) + _retrieval(cfg, inventory, found)
    size = min(g.total_gib for g in inventory)
    if wanted > visible:
        at_least = _at_least(tenants, size, visible, name, visible)
        fix = f"; {at_least}" if at_least else f": pass placement=gpu{_largest_plan(visible)}"
        return [f"placement={name} needs {wanted} GPUs, {visible} visible{fix}"]
    gpus = {g.index: g for g in inventory}
    for t in tenants:
        if missing := [d for d in t.devices if d not in gpus]:
            found.append(f"{t.key} places {t.what} on GPU {missing[0]}, not visible (GPUs {sorted(gpus)})")
    found += filter(None, (_share_problem(t, gpus) for t in tenants))
    for gpu in inventory:
        found += filter(None, [_device_problem(gpu, [t for t in tenants if gpu.index in t.devices])])
    if not found:
        return []
    at_least = _at_least(tenants, size, visible, name, len({d for t in tenants for d in t.devices}))
    if at_least:
        found.insert(0, at_least)
    elif not wanted:
        found.append(f"placement={name} places nothing: pass placement=gpu{_largest_plan(visible)}")
    gib = plan.get("gpu_gib")
    if gib and size < SIZE_SLACK * gib:
        found.append(
            f"placement={name} is sized for GPUs of {gib} GiB, these have {size:.0f}: write a plan for "
            "them (docs/gpu-placement.md)"
        )
    return found
