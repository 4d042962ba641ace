"""GPU plans: before a job starts, give each of its models GPUs and memory, and check that they fit.

A plan (``conf/placement/*.yaml``, docs/gpu-placement.md) sets each component's own device keys: a vLLM
server's ``gpus`` (its CUDA_VISIBLE_DEVICES), ``tensor_parallel_size``, ``data_parallel_size`` and
``gpu_memory_utilization``, the dense encoder's ``device`` and the reranker's ``devices``. Every index is a
position among the GPUs the job can see (:mod:`lazymem.gpu.inventory`). The shipped plans (``gpu1`` ...
``gpu8``, ``placement.derive: true``) derive those keys from the visible GPUs (:func:`derive`): which GPUs
each model takes, the tensor parallel size a vLLM server needs on GPUs of this size, replicas on GPUs left
over, and each server's share from the memory each GPU reports (:mod:`lazymem.gpu.layout`). A plan of your
own sets the keys itself; both are checked the same way (:func:`plan_problems`), against what each model
needs (:mod:`lazymem.gpu.budget`).
"""

from __future__ import annotations

import math

from lazymem.gpu.budget import MARGIN_GIB, MAX_UTIL, Tenant
from lazymem.gpu.inventory import SOLD_GB, Gpu, sold_as
from lazymem.gpu.layout import apply_layout, fits, lay_out, least_gpus
from lazymem.gpu.tenants import tenants

# GPU counts of the shipped plans conf/placement/gpuN.yaml
SHIPPED = (1, 2, 4, 8)


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
    placed = lay_out(models, inventory[:wanted])
    if isinstance(placed, str):
        least = least_gpus(models, size)
        fix = "no count of GPUs of this size holds it: use larger GPUs"
        if least:
            fix = f"run it on a node with {least} of them and pass placement=gpu{_plan_for(least)}"
        larger = [gb for gb in SOLD_GB if gb > sold_as(size) and fits(models, _sold(wanted, gb))]
        if larger:
            fix += f", or on {wanted} GPU{'s' if wanted > 1 else ''} of {larger[0]} GB (placement={name})"
        return [f"placement={name} on {_sizes(inventory[:wanted])}: {placed}; {fix}"]
    return apply_layout(cfg, placed)


def _sold(n: int, gb: int) -> list[Gpu]:
    """n GPUs sold as `gb` GB, as they report themselves (an 80 GB H100: 79.6 GiB)."""
    gib = 0.995 * gb
    return [Gpu(i, gib, gib) for i in range(n)]


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


def _at_least(models: list[Tenant], size: float, visible: int, name: str, used: int) -> str | None:
    """The job's least total need, when it takes more GPUs of `size` GiB than are visible or than plan
    `name` uses (`used` of them)."""
    total = sum(t.need() * t.count for t in models)
    n = max(math.ceil(total / size), least_gpus(models, size) or 0)
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
