"""Before a chain starts anything: every problem its stages would stop on, listed at once with the fix for
each, so that a missing model, key or GPU surfaces in seconds and not hours in, after SFT.

Each stage's composed config goes to its task's own check (the task contract's `problems(cfg)`, found by
the plan: lazymem/chain/plan.py's `task_of`). Problems naming a path inside
the chain's run directory are left out: those are earlier stages' outputs, which the stage checks itself
when it starts. The same message from several stages is listed once, with their names.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from lazymem.chain.plan import Decision


def problems(decisions: Sequence[Decision], chain_dir: Path, gpus: int | None) -> list[str]:
    """`gpus`: the GPUs the chain's Ray will have (None: a cluster joined at chain.ray.address, whose GPUs
    Ray checks)."""
    stages_of: dict[str, list[str]] = {}
    for d in decisions:
        if not d.runs or d.config is None:
            continue
        found = []
        if gpus is not None and d.stage.gpus > gpus:
            found.append(f"needs {d.stage.gpus:g} GPUs (its chain.stages.<stage>.gpus); this node has {gpus}")
        check = d.task.problems if d.task else None
        if check is not None:
            try:
                found += check(d.config)
            except Exception as e:  # a check that cannot run is itself a finding, never a traceback
                found.append(f"could not be checked: {type(e).__name__}: {e}")
        for message in found:
            if str(chain_dir) not in message:
                stages_of.setdefault(message, []).append(d.stage.name)
    return [f"{', '.join(names)}: {message}" for message, names in stages_of.items()]
