"""A derived plan's layout: which GPUs each of a job's models takes, the tensor parallel size and replicas of
each vLLM server, and each server's share of its GPUs; written into the components' device keys."""

from __future__ import annotations

import math

from omegaconf import OmegaConf, open_dict

from lazymem.gpu.budget import MAX_UTIL, Tenant
from lazymem.gpu.inventory import Gpu
from lazymem.gpu.tenants import SERVER_KEYS

# tensor parallel sizes a derived plan tries, smallest first
TP_SIZES = (1, 2, 4, 8)


def lay_out(models: list[Tenant], gpus: list[Gpu]) -> list[Tenant] | str:
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
            fitting = [tp for tp in TP_SIZES if tp <= len(gpus) and t.need(tp) <= MAX_UTIL * size]
            if not fitting:
                widest = max(tp for tp in TP_SIZES if tp <= len(gpus))
                return (
                    f"{t.what} needs {t.need(widest):.1f} GiB per GPU at tensor parallel {widest}, more than "
                    f"{MAX_UTIL:g} of a {size:.1f} GiB GPU"
                )
            t.tp, t.dp = fitting[0], 1
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


def apply_layout(cfg, models: list[Tenant]) -> list[str]:
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


def fits(models: list[Tenant], gpus: list[Gpu]) -> bool:
    """Whether a derived layout holds `models` on `gpus` (laid out as copies: `models` keep their devices)."""
    return not isinstance(lay_out([_copy(t) for t in models], gpus), str)


def _copy(t: Tenant) -> Tenant:
    return Tenant(**{**t.__dict__, "devices": list(t.devices)})


def least_gpus(models: list[Tenant], size: float, limit: int = 16) -> int | None:
    """The fewest GPUs of `size` GiB a derived plan needs for these models (None: more than `limit`)."""
    for n in range(1, limit + 1):
        if fits(models, [Gpu(i, size, size) for i in range(n)]):
            return n
    return None


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
