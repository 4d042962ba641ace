"""The GPUs a job can see, numbered as it sees them, with the memory each reports and the size it is sold as.

Every index in a plan is a position among these GPUs (CUDA_VISIBLE_DEVICES order: under SLURM's ``2,3``,
GPU 0 is the node's GPU 2)."""

from __future__ import annotations

import math
import os
import shutil
import subprocess
from typing import NamedTuple

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
