"""Before a chain starts anything: every problem its stages would stop on, listed at once with the fix for
each, so that a missing model, key or GPU surfaces in seconds and not hours in, after SFT.

Each stage's composed config goes to its task's own check (the task contract's `problems(cfg)`, found by
the plan: lazymem/chain/plan.py's `task_of`). Problems naming a path inside
the chain's run directory are left out: those are earlier stages' outputs, which the stage checks itself
when it starts. The same message from several stages is listed once, with their names.
The stage that sees the reserved GPUs (GRPO's) is checked against its engine and its GPU plan here too: its
task's own check, run in the chain's process, sees the node's GPUs and not the stage's.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from omegaconf import DictConfig, OmegaConf

from lazymem.chain.plan import Decision
from lazymem.gpu.training import training


def judge_gpu(d: Decision, shared: Sequence[str]) -> list[str]:
    """A stage with `sees_reserved` whose config trains with GRPO (train.grpo): its `gpus` are the GPUs its
    engine takes on this node, and the reserved GPU (`shared`), which it sees right after its own, is where
    its GPU plan puts the reward judge (lazymem/gpu/training.py: placement.train.reward_judge, derived as
    the GPU after VERL's) and none of VERL's."""
    cfg = d.config
    grpo = OmegaConf.select(cfg, "train.grpo") if isinstance(cfg, DictConfig) else None
    if not d.stage.sees_reserved or grpo is None:
        return []
    own = d.stage.gpus
    # VERL takes no GPU of this node when it joins a cluster or spans nodes (its engine's launch: local_gpus)
    remote = bool(grpo.get("ray_address")) or int(grpo.get("nnodes") or 1) != 1
    takes = 0 if remote else int(grpo.n_gpus_per_node)
    found = []
    if own != takes:
        found.append(
            f"holds {own:g} GPUs (its chain.stages.<stage>.gpus) but its engine takes {takes} on this node "
            f"(train.grpo.n_gpus_per_node = {grpo.n_gpus_per_node}"
            + (", train.grpo.ray_address or nnodes: VERL's workers run elsewhere" if remote else "")
            + "): make them agree"
        )
    if found or not shared or remote or own % 1:  # the GPUs it sees follow from its own count
        return found
    # the plan's indices alone, among the GPUs it sees: its own, then the reserved ones (process.py gpu_env);
    # no inventory, so no fit is estimated (the stage checks that when it starts)
    plan, _ = training(cfg, [])
    unset = (
        "leave placement.train.grpo and .reward_judge unset in the stage (VERL's first GPUs, the judge next)"
    )
    if "reward_judge" in plan and plan["reward_judge"] != [int(own)]:
        found.append(
            f"sees the reserved GPU {shared[0]} (chain.ray.reserved_gpus) right after its own {own:g}, as "
            f"its GPU {own:g}, but its GPU plan puts the reward judge on its GPU {plan['reward_judge'][0]} "
            f"(placement.train.reward_judge; unset: the GPU after placement.train.grpo's): {unset}"
        )
    if beyond := [i for i in plan.get("grpo", []) if i >= own]:
        what = "the reserved one" if beyond[0] == own else "not one it sees"
        found.append(
            f"its GPU plan gives VERL its GPUs {plan['grpo']} (placement.train.grpo) but it holds {own:g}: "
            f"GPU {beyond[0]} is {what}; {unset}"
        )
    return found


def _checked(check, *args) -> list[str]:
    try:
        return list(check(*args))
    except Exception as e:  # a check that cannot run is itself a finding, never a traceback
        return [f"could not be checked: {type(e).__name__}: {e}"]


def problems(
    decisions: Sequence[Decision], chain_dir: Path, gpus: int | None, shared: Sequence[str] = ()
) -> list[str]:
    """`gpus`: the GPUs the chain's Ray will have (None: a cluster joined at chain.ray.address, whose GPUs
    Ray checks); `shared`: the reserved GPUs, kept out of its pool, that a stage with `sees_reserved` sees
    after its own."""
    stages_of: dict[str, list[str]] = {}
    for d in decisions:
        if not d.runs or d.config is None:
            continue
        found = []
        if gpus is not None and d.stage.gpus > gpus:
            found.append(f"needs {d.stage.gpus:g} GPUs (its chain.stages.<stage>.gpus); this node has {gpus}")
        check = d.task.problems if d.task else None
        found += _checked(check, d.config) if check is not None else []
        found += _checked(judge_gpu, d, shared)
        for message in found:
            if str(chain_dir) not in message:
                stages_of.setdefault(message, []).append(d.stage.name)
    return [f"{', '.join(names)}: {message}" for message, names in stages_of.items()]
