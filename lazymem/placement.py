"""GPU placement: before a job starts, give each of its models GPUs and memory, and check that they fit.

A plan (``conf/placement/*.yaml``, docs/gpu-placement.md) sets each component's own device keys: a vLLM
server's ``gpus`` (its CUDA_VISIBLE_DEVICES), ``tensor_parallel_size``, ``data_parallel_size`` and
``gpu_memory_utilization``, the dense encoder's ``device`` and the reranker's ``devices``. Every index is a
position among the GPUs the job can see (CUDA_VISIBLE_DEVICES order: under SLURM's ``2,3``, GPU 0 is the
node's GPU 2). The shipped plans (``gpu1`` ... ``gpu8``, ``placement.derive: true``) derive those keys from
the visible GPUs (:func:`derive`): which GPUs each model takes, the tensor parallel size a vLLM server needs
on GPUs of this size, replicas on GPUs left over, and each server's share from the memory each GPU reports.
A plan of your own sets the keys itself; both are checked the same way (:func:`plan_problems`).

Each model's memory is estimated from its directory (:mod:`lazymem.model_memory`). vLLM 0.32 reserves
``gpu_memory_utilization`` x the GPU's total memory when it starts (and will not start unless that much is
free), and gives its KV cache what is left of that after the weights, the peak activation of a profile
forward pass, its non-torch memory and the CUDA graphs it will capture
(vllm/v1/worker/gpu_worker.py:632-760); it refuses to start when that cannot hold one ``max_model_len``
sequence (vllm/v1/core/kv_cache_utils.py:1104-1137). So a server counts for its whole share, and needs its
weights, :func:`vllm_overhead` and one full sequence's KV cache in it, plus :data:`MARGIN_GIB`; the encoder
and the reranker count for their weights, the peak activations of one full batch of their longest inputs
(:func:`lazymem.model_memory.activation_gib`: Qwen3-Embedding-8B's 16 x 8,192 tokens take 12 GiB) and
:data:`TORCH_CONTEXT_GIB`.
"""

from __future__ import annotations

import json
import logging
import math
import os
import shutil
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import NamedTuple
from urllib.parse import urlsplit

from omegaconf import OmegaConf, open_dict

from lazymem.llm.backends import Backend, get_backend
from lazymem.llm.cache import canonical_json
from lazymem.llm.llm_set import role_config, to_dict
from lazymem.model_memory import activation_gib, kv_gib, model_gib

log = logging.getLogger(__name__)

# activations and CUDA graphs of a vLLM server per GiB of weights on the GPU: issue 32's audit cites a
# published vLLM log of a dense 27B (50 GiB in bfloat16) with 3.2 GiB for the two; 3.9 for Qwen3-32B's 61
ACTIVATION_SHARE = 0.064
# the least a server's activations and CUDA graphs take, however small its model
MIN_ACTIVATION_GIB = 1.0
# vLLM's non-torch memory per GPU (cuBLAS workspaces), and with tensor parallelism (NCCL's buffers too)
NON_TORCH_GIB, NON_TORCH_TP_GIB = 0.5, 1.0
# GiB per GPU that every server's share keeps beyond its estimated need: what the estimates may be off by
MARGIN_GIB = 1.0
# the KV cache a server must hold when its model's config does not say
MIN_KV_GIB = 1.0
# the dense encoder's and the reranker's CUDA context, cuBLAS workspace and allocator slack, beside the
# activations of one batch (model_memory.activation_gib)
TORCH_CONTEXT_GIB = 1.0
# the same with the activations, for a model whose config does not tell them
TORCH_OVERHEAD_GIB = 2.0
# the batch and input length of the encoder and the reranker when their config does not say: the defaults
# of lazymem/retrieval/dense.py (64, the model's own length) and rerank.py's FlagReranker (32, 1,024)
ENCODER_BATCH, RERANKER_BATCH, RERANKER_TOKENS = 64, 32, 1024
# the largest share of a GPU a plan hands out: the rest is the CUDA contexts' (outside vLLM's share)
MAX_UTIL = 0.95
# GPU counts of the shipped plans conf/placement/gpuN.yaml
SHIPPED = (1, 2, 4, 8)
# tensor parallel sizes a derived plan tries, smallest first
TP_SIZES = (1, 2, 4, 8)
# GPU sizes as sold, in GB; a GPU counts as the nearest one it reaches 92% of (an L40S "48 GB" reports
# 45.0 GiB, an H100 80GB 79.6, an H200 140.4)
SOLD_GB = (16, 24, 32, 40, 48, 80, 94, 96, 141, 180, 192)


class Gpu(NamedTuple):
    index: int  # position among the GPUs the job can see: what plans, `gpus` and cuda:K name
    total_gib: float
    free_gib: float


def sold_as(total_gib: float) -> int:
    """The size in GB a GPU reporting `total_gib` GiB is sold as (48 for an L40S's 45.0 GiB)."""
    sizes = [s for s in SOLD_GB if total_gib >= 0.92 * s] or [round(total_gib)]
    return min(sizes, key=lambda s: abs(math.log(total_gib / s)))


def gpu_inventory() -> list[Gpu]:
    """The GPUs this process may use, numbered as it sees them: nvidia-smi's list in CUDA_VISIBLE_DEVICES
    order (entries are node indices or UUIDs) when that variable is set, else all of it; [] without
    nvidia-smi or when it fails."""
    if not shutil.which("nvidia-smi"):
        return []
    query = ["nvidia-smi", "--query-gpu=index,uuid,memory.total,memory.free", "--format=csv,noheader,nounits"]
    try:
        out = subprocess.run(query, capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.SubprocessError):
        return []
    found: dict[str, tuple[float, float]] = {}  # node index and UUID -> (total, free) GiB
    order: list[str] = []
    for line in out.stdout.splitlines() if out.returncode == 0 else []:
        try:
            index, uuid, total, free = (x.strip() for x in line.split(","))
            gib = (float(total) / 1024, float(free) / 1024)  # nvidia-smi reports MiB
        except ValueError:
            continue
        found[index] = found[uuid] = gib
        order.append(index)
    if "CUDA_VISIBLE_DEVICES" in os.environ:
        order = [w.strip() for w in os.environ["CUDA_VISIBLE_DEVICES"].split(",") if w.strip()]
        order = order[
            : next((k for k, w in enumerate(order) if w not in found), len(order))
        ]  # CUDA stops there
    return [Gpu(k, *found[w]) for k, w in enumerate(order)]


def vllm_overhead(weights_per_gpu: float, tp: int = 1) -> float:
    """GiB per GPU a vLLM server takes beside its weights and KV cache: activations and CUDA graphs by model
    size, and non-torch memory."""
    activations = max(MIN_ACTIVATION_GIB, ACTIVATION_SHARE * weights_per_gpu)
    return activations + (NON_TORCH_TP_GIB if tp > 1 else NON_TORCH_GIB)


@dataclass
class Tenant:
    """One model on the GPUs: where it is, what it takes there and what it needs."""

    what: str  # for messages, e.g. "vLLM server qwen3-32b (Qwen3-32B; roles answer, memory)"
    key: str  # the config key that places it
    devices: list[int]  # GPU indices as in the inventory
    weights: float | None  # GiB of weights in all; None: unknown
    server: bool = False  # a vLLM server (else a torch model: the encoder, the reranker)
    tp: int = 1  # a server's GPUs per replica
    dp: int = 1  # its replicas
    kv: float = 0.0  # GiB of KV cache of one max_model_len sequence, over a replica's GPUs
    tokens: int | None = None  # its max_model_len
    seqs: int | None = None  # its max_num_seqs
    util: float | None = None  # vLLM's share of each GPU; None: takes `need`
    util_key: str = ""
    keys: dict[str, list[str]] = field(default_factory=dict)  # option -> every config key holding it
    model: str = ""  # its model directory
    roles: list[str] = field(default_factory=list)  # a server's roles
    act: float | None = None  # a torch model's GiB of activations for one batch; None: unknown

    @property
    def count(self) -> int:
        """GPUs it takes."""
        return self.tp * self.dp if self.server else max(1, len(self.devices))

    def per_gpu(self, tp: int | None = None) -> float:
        return (self.weights or 0.0) / (tp or self.tp)

    def overhead(self, tp: int | None = None) -> float:
        tp = tp or self.tp
        if self.server:
            return vllm_overhead(self.per_gpu(tp), tp)
        return TORCH_OVERHEAD_GIB if self.act is None else TORCH_CONTEXT_GIB + self.act

    def need(self, tp: int | None = None) -> float:
        """Least GiB per GPU: weights, overhead, one full sequence's KV cache and the margin."""
        tp = tp or self.tp
        return self.per_gpu(tp) + self.overhead(tp) + (self.kv / tp + MARGIN_GIB if self.server else 0.0)

    def takes(self, gpu: Gpu) -> float:
        return self.util * gpu.total_gib if self.util is not None else self.need()

    def kv_budget(self, gpu: Gpu) -> float:
        """GiB per GPU left to a server's KV cache in its share."""
        return self.takes(gpu) - self.per_gpu() - self.overhead()


def _weights(what: str, model: str, dtype) -> float | None:
    gib = model_gib(model, dtype)
    if gib is None:
        log.warning("placement: cannot estimate the memory of %s from %r: weights not counted", what, model)
    return gib


def _vllm_key(llm: dict, role: str, name: str) -> str:
    own = ((llm.get("roles") or {}).get(role) or {}).get("vllm") or {}
    return f"llm.roles.{role}.vllm.{name}" if name in own else f"llm.common.vllm.{name}"


SERVER_KEYS = ("gpus", "tensor_parallel_size", "data_parallel_size", "gpu_memory_utilization")


def _servers(cfg, roles: list[str], visible: list[Gpu], found: list[str], every: bool) -> list[Tenant]:
    """The job's distinct vLLM servers on GPUs (roles with equal server specs share one); `every`: those
    set to the CPU too (the first-GPU-run check plans them as a GPU node would)."""
    llm = to_dict(cfg.llm)
    groups: dict[str, tuple[list[str], Backend]] = {}
    for role in roles:
        try:
            backend = get_backend(role_config(llm, role)).resolve()
        except (KeyError, ValueError):
            continue  # preflight names what is wrong with the role itself
        if backend.name == "vllm" and (backend.needs_gpu or every):
            groups.setdefault(canonical_json(backend.server_spec()), ([], backend))[0].append(role)
    models = []
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
        kv = kv_gib(backend.model, o.get("max_model_len"), o.get("dtype"))
        tokens = o.get("max_model_len")
        keys = {name: sorted({_vllm_key(llm, r, name) for r in served}) for name in SERVER_KEYS}
        models.append(
            Tenant(
                what,
                gpus_key,
                devices,
                _weights(what, backend.model, o.get("dtype")),
                server=True,
                tp=tp,
                dp=dp,
                kv=MIN_KV_GIB if kv is None else kv,
                tokens=int(tokens) if tokens else None,
                seqs=o.get("max_num_seqs"),
                util=float(o.get("gpu_memory_utilization") or 0.9),  # unset: vLLM's default
                util_key=_vllm_key(llm, role, "gpu_memory_utilization"),
                keys=keys,
                model=backend.model,
                roles=served,
            )
        )
    return models


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
        batch = (
            enc.get("batch_size") or ENCODER_BATCH,
            enc.get("max_seq_length") or _st_length(enc.get("model")),
        )
        parts.append((f"the {name} encoder", key, enc.get("model"), enc.get("device", "auto"), dtype, batch))
    rr = retrieval.get("reranker") or {}
    if "devices" in rr:  # FlagReranker (BGE)
        dtype = "float16" if rr.get("use_fp16", True) else "float32"
        key = "retrieval.reranker.devices"
        batch = (rr.get("batch_size") or RERANKER_BATCH, rr.get("max_length") or RERANKER_TOKENS)
        parts.append(("the reranker", key, rr.get("model"), rr.get("devices"), dtype, batch))
    models = []
    for label, key, model, spec, dtype, (size, tokens) in parts:
        if not model or str(model).startswith("bundled:"):
            continue
        what = f"{label} ({Path(str(model)).name})"
        devices, missing = _torch_devices(spec, visible)
        if missing:
            found.append(f"{key} = {spec!r}: {', '.join(missing)} is not visible ({len(visible)} GPUs)")
        if devices or missing:
            act = activation_gib(str(model), int(size), tokens, dtype)
            weights = _weights(what, str(model), dtype)
            models.append(Tenant(what, key, devices, weights, model=str(model), act=act))
    return models


def _st_length(model) -> int | None:
    """sentence-transformers' own input limit of a model directory (sentence_bert_config.json), which it
    truncates to when max_seq_length is null; None: the model's context length bounds it."""
    path = Path(str(model)).expanduser() / "sentence_bert_config.json"
    try:
        return json.loads(path.read_text())["max_seq_length"]
    except (OSError, ValueError, KeyError, TypeError):
        return None


def _plan_for(n: int) -> int:
    """The smallest shipped plan with at least n GPUs."""
    return next((k for k in SHIPPED if k >= n), SHIPPED[-1])


def _largest_plan(visible: int) -> int:
    """The largest shipped plan that `visible` GPUs can run."""
    return max((k for k in SHIPPED if k <= visible), default=SHIPPED[0])


def _sizes(gpus: list[Gpu]) -> str:
    size = min(g.total_gib for g in gpus)
    return f"{len(gpus)} GPU{'s' if len(gpus) > 1 else ''} of {sold_as(size)} GB ({size:.1f} GiB)"


def _listed(models: list[Tenant], gpu: Gpu | None = None) -> str:
    return "; ".join(f"{t.what}: {t.takes(gpu) if gpu else t.need() * t.count:.1f} [{t.key}]" for t in models)


def _fits(models: list[Tenant], gpus: list[Gpu]) -> bool:
    return not isinstance(_layout([_copy(t) for t in models], gpus), str)


def _copy(t: Tenant) -> Tenant:
    return Tenant(**{**t.__dict__, "devices": list(t.devices)})


def _least_gpus(models: list[Tenant], size: float, limit: int = 16) -> int | None:
    """The fewest GPUs of `size` GiB a derived plan needs for these models (None: more than `limit`)."""
    for n in range(1, limit + 1):
        if _fits(models, [Gpu(i, size, size) for i in range(n)]):
            return n
    return None


def _at_least(models: list[Tenant], size: float, visible: int, name: str, used: int) -> str | None:
    """The job's least total need, when it takes more GPUs of `size` GiB than are visible or than plan
    `name` uses (`used` of them)."""
    total = sum(t.need() * t.count for t in models)
    n = max(math.ceil(total / size), _least_gpus(models, size) or 0)
    if n <= min(visible, used):
        return None
    head = (
        f"this job's models need at least {total:.0f} GiB of GPU memory ({_listed(models)}), "
        f"so at least {n} GPUs of {sold_as(size)} GB"
    )
    fix = f"pass placement=gpu{_plan_for(n)}"
    if n > visible:
        return f"{head}; {visible} visible: run it on a node with {n} GPUs and {fix}"
    return f"{head}; placement={name} uses {used}: {fix}"


def _share_problem(t: Tenant, gpus: dict[int, Gpu]) -> str | None:
    """A vLLM server whose share of a GPU cannot hold its model and one full sequence, with the fix."""
    gpu = min((gpus[d] for d in t.devices if d in gpus), key=lambda g: g.total_gib, default=None)
    if gpu is None or not t.server or t.weights is None or t.need() <= t.takes(gpu):
        return None
    util = math.ceil(t.need() / gpu.total_gib * 100) / 100
    more = "split it over more GPUs (tensor_parallel_size, and as many in gpus) or use a plan with more GPUs"
    fix = (
        f"pass {t.util_key}={util:.2f}, or {more}" if util <= MAX_UTIL else f"it does not fit one GPU: {more}"
    )
    return (
        f"{t.what} needs about {t.need():.1f} GiB per GPU ({t.per_gpu():.1f} of weights, {t.overhead():.1f} "
        f"of activations, CUDA graphs and non-torch memory, {t.kv / t.tp:.1f} of KV cache for one "
        f"{t.tokens or 'full'}-token sequence, {MARGIN_GIB:g} of margin) but gpu_memory_utilization "
        f"{t.util:g} gives it {t.takes(gpu):.1f} of GPU {gpu.index}'s {gpu.total_gib:.1f} GiB: {fix}"
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
        if util * gpu.total_gib >= big.need():
            fix = f"pass {big.util_key}={util:.2f}, or {fix}"
    return (
        f"GPU {gpu.index} is over-subscribed: {planned:.1f} GiB planned of {gpu.total_gib:.1f} "
        f"({_listed(on, gpu)}): {fix}"
    )


def tenants(cfg, inventory: list[Gpu], roles: list[str], found: list[str], every: bool) -> list[Tenant]:
    """The job's models on GPUs: its vLLM servers (`every`: those set to the CPU too), encoders, reranker;
    what is wrong with their keys goes to `found`."""
    return _servers(cfg, roles, inventory, found, every) + _retrieval(cfg, inventory, found)


def _check(cfg, inventory: list[Gpu], models: list[Tenant], found: list[str]) -> list[str]:
    """What keeps the placed `models` from fitting `inventory`, each with its fix."""
    plan = cfg.get("placement") or {}
    name, wanted, visible = plan.get("name", "none"), int(plan.get("gpus") or 0), len(inventory)
    size = min(g.total_gib for g in inventory)
    gpus = {g.index: g for g in inventory}
    for t in models:
        if missing := [d for d in t.devices if d not in gpus]:
            found.append(f"{t.key} places {t.what} on GPU {missing[0]}, not visible (GPUs {sorted(gpus)})")
    found += filter(None, (_share_problem(t, gpus) for t in models))
    for gpu in inventory:
        found += filter(None, [_device_problem(gpu, [t for t in models if gpu.index in t.devices])])
    if not found:
        return []
    at_least = _at_least(models, size, visible, name, len({d for t in models for d in t.devices}))
    if at_least:
        found.insert(0, at_least)
    elif not wanted:
        found.append(f"placement={name} places nothing: pass placement=gpu{_largest_plan(visible)}")
    return found


def _pack(items: list[Tenant], order: list[int], room: dict[int, float]) -> Tenant | None:
    """First fit, largest need first: each item onto the first GPUs in `order` with room for it (a server
    with tensor parallelism onto `tp` of them). Returns the first item that fits nowhere."""
    for t in sorted(items, key=lambda t: -t.need()):
        fit = [i for i in order if room[i] >= t.need()][: t.count]
        if len(fit) < t.count:
            return t
        t.devices = fit
        for i in fit:
            room[i] -= t.need()
    return None


def _layout(models: list[Tenant], gpus: list[Gpu]) -> list[Tenant] | str:
    """Devices, tensor parallel size, replicas and shares of `models` on `gpus`, or why they do not fit.

    Each server gets the smallest tensor parallel size at which it fits one GPU's largest share. The
    largest server takes the first GPUs; the others are packed onto the GPUs after it, on as few as they
    fit; GPUs left over hold more replicas of the largest server (data parallel). Where nothing is left over
    (one GPU), everything shares. Each server's share of a GPU is then its part of what the torch models
    leave there, in proportion to its need."""
    size = min(g.total_gib for g in gpus)
    for t in models:
        if not t.server:
            t.devices = []  # one GPU each, wherever its key pointed
        else:
            fits = [tp for tp in TP_SIZES if tp <= len(gpus) and t.need(tp) <= MAX_UTIL * size]
            if not fits:
                widest = max(tp for tp in TP_SIZES if tp <= len(gpus))
                return (
                    f"{t.what} needs {t.need(widest):.1f} GiB per GPU at tensor parallel {widest}, more than "
                    f"{MAX_UTIL:g} of a {size:.1f} GiB GPU"
                )
            t.tp, t.dp = fits[0], 1
    servers = sorted((t for t in models if t.server), key=lambda t: -(t.weights or 0.0))
    big = servers[0] if servers else None
    others = [t for t in models if t is not big]
    order = [g.index for g in gpus]
    room = {g.index: MAX_UTIL * g.total_gib for g in gpus}
    alone = _least_alone(others, MAX_UTIL * size)
    if big is None:
        misfit = _pack(others, order, room)
    elif alone is not None and big.tp + alone <= len(order):  # others on GPUs of their own
        big.dp = (len(order) - alone) // big.tp
        big.devices = order[: big.tp * big.dp]
        for i in big.devices:
            room[i] -= big.need()
        misfit = _pack(others, order[big.tp * big.dp :], room)
    else:  # everything shares the GPUs
        big.devices = order[: big.tp]
        for i in big.devices:
            room[i] -= big.need()
        misfit = _pack(others, order[big.tp :] + order[: big.tp], room)
    if misfit is not None:
        return f"{misfit.what} ({_need(misfit)}) finds no GPU with room for it"
    by_index = {g.index: g for g in gpus}
    for t in models:
        if t.server:
            shares = []
            for i in t.devices:
                on = [s for s in models if i in s.devices]
                left = MAX_UTIL * by_index[i].total_gib - sum(s.need() for s in on if not s.server)
                part = left * t.need() / sum(s.need() for s in on if s.server)
                shares.append(part / by_index[i].total_gib)
            t.util = math.floor(min(shares) * 100) / 100
    return models


def _need(t: Tenant) -> str:
    """A model's need in GiB, a torch model's with its batch's activations and where to make them smaller."""
    if t.server or t.act is None:
        return f"{t.need():.1f} GiB"
    return (
        f"{t.need():.1f} GiB: {t.per_gpu():.1f} of weights, {t.act:.1f} of activations for one full batch; a "
        f"smaller batch_size or max length under {t.key.rsplit('.', 1)[0]} takes less"
    )


def _least_alone(items: list[Tenant], cap: float) -> int | None:
    """GPUs of `cap` GiB that first fit needs for `items` alone (None: one of them fits no GPU)."""
    bins: list[float] = []
    for t in sorted(items, key=lambda t: -t.need()):
        if t.need() > cap:
            return None
        fit = [k for k, left in enumerate(bins) if left >= t.need()][: t.count]
        fit += [len(bins) + k for k in range(t.count - len(fit))]
        bins += [cap] * (max(fit) + 1 - len(bins))
        for k in fit:
            bins[k] -= t.need()
    return len(bins)


def _apply(cfg, models: list[Tenant]) -> list[str]:
    """Write a derived layout into the components' keys; the problems of keys two servers share."""
    values: dict[str, object] = {}
    found = []
    for t in models:
        if t.server:
            mine = (",".join(map(str, t.devices)), t.tp, t.dp, t.util)
            for name, value in zip(SERVER_KEYS, mine, strict=True):
                for key in t.keys[name]:
                    if values.setdefault(key, value) != value:
                        found.append(
                            f"two vLLM servers share {key} and a derived plan would set it to "
                            f"{values[key]!r} and {value!r}: give {t.what} keys of its own under llm.roles"
                        )
        elif t.key.endswith(".devices"):
            values[t.key] = [f"cuda:{i}" for i in t.devices]
        else:
            values[t.key] = f"cuda:{t.devices[0]}"
    if not found:
        with open_dict(cfg):
            for key, value in values.items():
                OmegaConf.update(cfg, key, value, merge=False)
    return found


def derive(cfg, inventory: list[Gpu], roles: list[str], every: bool = False) -> list[str]:
    """Place the job's models on the first ``placement.gpus`` visible GPUs (0: all of them) and set their
    keys in `cfg`; [] when they fit, else the problems that keep them from fitting, each with its fix."""
    visible = len(inventory)
    name, wanted = cfg.placement.name, int(cfg.placement.gpus or 0) or visible
    found: list[str] = []
    models = tenants(cfg, inventory[:wanted], roles, found, every)
    size = min(g.total_gib for g in inventory)
    if wanted > visible:
        at_least = _at_least(models, size, visible, name, wanted)
        fix = f"; {at_least}" if at_least else f": pass placement=gpu{_largest_plan(visible)}"
        return [f"placement={name} needs {wanted} GPUs, {visible} visible{fix}"]
    placed = _layout(models, inventory[:wanted])
    if isinstance(placed, str):
        least = _least_gpus(models, size)
        fix = "no count of GPUs of this size holds it: use larger GPUs"
        if least:
            fix = f"run it on a node with {least} of them and pass placement=gpu{_plan_for(least)}"
        larger = [gb for gb in SOLD_GB if gb > sold_as(size) and _fits(models, _sold(wanted, gb))]
        if larger:
            fix += f", or on {wanted} GPU{'s' if wanted > 1 else ''} of {larger[0]} GB (placement={name})"
        return [f"placement={name} on {_sizes(inventory[:wanted])}: {placed}; {fix}"]
    return _apply(cfg, placed)


def _sold(n: int, gb: int) -> list[Gpu]:
    """n GPUs sold as `gb` GB, as they report themselves (an 80 GB H100: 79.6 GiB)."""
    gib = 0.995 * gb
    return [Gpu(i, gib, gib) for i in range(n)]


def place(cfg, inventory: list[Gpu], roles: list[str], every: bool = False) -> list[str]:
    """Derive the plan where it says so (``placement.derive``), then check it against the visible GPUs: the
    problems, each with its fix; [] when it fits or no GPU is visible. `every`: plan the vLLM servers set
    to the CPU too."""
    if not inventory:
        return []
    if (cfg.get("placement") or {}).get("derive") and (found := derive(cfg, inventory, roles, every)):
        return found
    return plan_problems(cfg, inventory, roles, every)


def plan_problems(cfg, inventory: list[Gpu], roles: list[str], every: bool = False) -> list[str]:
    """What keeps the job's GPU plan (``cfg.placement`` and the components' device keys) from fitting the
    GPUs in ``inventory``, each with its fix; [] when it fits or no GPU is visible."""
    if not inventory:
        return []
    plan = cfg.get("placement") or {}
    name, wanted, visible = plan.get("name", "none"), int(plan.get("gpus") or 0), len(inventory)
    found: list[str] = []
    models = tenants(cfg, inventory, roles, found, every)
    if wanted > visible:
        at_least = _at_least(models, min(g.total_gib for g in inventory), visible, name, visible)
        fix = f"; {at_least}" if at_least else f": pass placement=gpu{_largest_plan(visible)}"
        return [f"placement={name} needs {wanted} GPUs, {visible} visible{fix}"]
    return _check(cfg, inventory, models, found)


def describe(cfg, inventory: list[Gpu], roles: list[str], every: bool = False) -> list[str]:
    """One line per model of the plan: its GPUs, the memory it gets there and, for a vLLM server, the KV
    cache that leaves and how many full-length sequences that holds."""
    found: list[str] = []
    models = tenants(cfg, inventory, roles, found, every)
    gpus = {g.index: g for g in inventory}
    lines = []
    for t in models:
        on = [gpus[d] for d in t.devices if d in gpus]
        if not on:
            continue
        gpu = min(on, key=lambda g: g.total_gib)
        where = f"GPU{'s' if len(on) > 1 else ''} {','.join(str(g.index) for g in on)}"
        line = f"{t.what}: {where}, {t.takes(gpu):.1f} GiB each"
        if t.server:
            budget = t.kv_budget(gpu)
            seqs = budget * t.tp / t.kv if t.kv else 0.0
            parallel = f"tensor parallel {t.tp} x {t.dp} replica{'s' if t.dp > 1 else ''}"
            line += (
                f" ({t.util:g} of {gpu.total_gib:.1f}; {parallel}): {t.per_gpu():.1f} weights, "
                f"{t.overhead():.1f} activations, CUDA graphs and non-torch memory, {budget:.1f} KV cache = "
                f"{seqs:.1f} sequences of {t.tokens or '?'} tokens (max_num_seqs {t.seqs or 'vLLM default'})"
            )
        else:
            extra = f"{t.overhead():.1f} a batch's activations, CUDA context"
            line += f": {t.weights or 0.0:.1f} weights + {extra}"
        lines.append(line)
    return lines


def _on_this_node(base_url: str | None) -> bool:
    return urlsplit(base_url or "").hostname in ("127.0.0.1", "localhost", "::1")


def _indices(value, n: int, start: int = 0) -> list[int]:
    """GPU indices of a plan key ("0,1", [0, 1], 0); null: `n` of them from `start`."""
    if value is None:
        return list(range(start, start + n))
    return [int(v) for v in (str(value).split(",") if not isinstance(value, list) else value)]


def judge_tenant(cfg) -> Tenant:
    """The quality-reward judge's vLLM server (``llm.roles.reward_judge``: an endpoint to the reward
    workers, served by hand as :func:`lazymem.tasks.train_grpo.judge_command` prints) as a tenant: Qwen3-32B
    (``llm.common.model``) with one ``context_tokens`` sequence of KV cache."""
    rc = role_config(cfg.llm, "reward_judge")
    vllm = rc.get("vllm") or {}
    what = f"the reward judge ({Path(str(rc.get('model'))).name} at {rc.get('base_url')})"
    kv = kv_gib(str(rc.get("model")), rc.get("context_tokens"), vllm.get("dtype"))
    return Tenant(
        what,
        "placement.train.reward_judge",
        [],
        _weights(what, str(rc.get("model")), vllm.get("dtype")),
        server=True,
        kv=MIN_KV_GIB if kv is None else kv,
        tokens=rc.get("context_tokens"),
        util=MAX_UTIL,
    )


def training(cfg, inventory: list[Gpu]) -> tuple[dict[str, list[int]], list[str]]:
    """Training's GPUs by index among those visible, from ``placement.train`` (null: derived) — ``sft``
    (LLaMA-Factory's ``train.sft.nproc_per_node``), ``grpo`` (VERL's ``train.grpo.n_gpus_per_node``) and
    ``reward_judge`` (the GPU after VERL's, when the judge's server runs on this node; none when it is an
    endpoint elsewhere) — for the stages in ``cfg.train``, and what keeps them from fitting, with fixes."""
    keys = OmegaConf.to_container(cfg.placement.get("train") or {}, resolve=True)
    train, visible, found = cfg.get("train") or {}, len(inventory), []
    plan: dict[str, list[int]] = {}
    if "sft" in train:
        plan["sft"] = _indices(keys.get("sft"), int(train.sft.nproc_per_node))
    if "grpo" in train:
        n = int(train.grpo.n_gpus_per_node)
        plan["grpo"] = _indices(keys.get("grpo"), n)
        if len(plan["grpo"]) != n:
            found.append(
                f"placement.train.grpo = {keys.get('grpo')!r} names {len(plan['grpo'])} GPUs but VERL takes "
                f"train.grpo.n_gpus_per_node = {n}: make them agree"
            )
        judge_url = role_config(cfg.llm, "reward_judge").get("base_url")
        if _on_this_node(judge_url):
            plan["reward_judge"] = _indices(keys.get("reward_judge"), 1, max(plan["grpo"]) + 1)
            if set(plan["reward_judge"]) & set(plan["grpo"]):
                found.append(
                    f"placement.train.reward_judge = {plan['reward_judge']} is one of VERL's GPUs "
                    f"{plan['grpo']}: give the judge a GPU of its own"
                )
    for stage, gpus in plan.items():
        if missing := [i for i in gpus if i >= visible]:
            fix = f"run it on a node with {max(gpus) + 1} GPUs"
            if stage == "reward_judge":
                fix += ", or serve the judge on another node and pass llm.roles.reward_judge.base_url=..."
            found.append(
                f"{stage} takes GPUs {gpus} (placement.train.{stage}), {missing[0]} is not visible "
                f"({visible} visible): {fix}"
            )
    if "reward_judge" in plan and not found:
        judge, gpu = judge_tenant(cfg), inventory[plan["reward_judge"][0]]
        if judge.weights is not None and judge.need() > MAX_UTIL * gpu.total_gib:
            found.append(
                f"{judge.what} needs {judge.need():.1f} GiB with a {judge.tokens}-token context "
                f"(llm.roles.reward_judge.context_tokens) but GPU {gpu.index} has {gpu.total_gib:.1f}: serve "
                "it on a larger GPU or another node (llm.roles.reward_judge.base_url)"
            )
    return plan, found
