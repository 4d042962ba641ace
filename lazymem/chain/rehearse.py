"""A chain's scheduling rehearsed in a minute (`make gpu-check`), so that a GPU node's first minutes catch
what only a GPU run showed before (issue 41): VERL's Ray workers running in the chain's Python and not in
the engine's (N16), and GRPO racing the evaluations for GPUs (N17).

Every stage of the chain runs through the chain's own code (its stages and their dependencies, the driver's
jobs, Ray's scheduling in schedule.py, each stage's environment in process.py), its command replaced by a
probe that notes when it ran and the GPUs it saw, and holds a moment so that stages that run together
overlap. The stage that sees the reserved GPU (`sees_reserved`: GRPO's, whose engine starts its own Ray)
runs its probe in the engine's Python and starts a Ray there as VERL does. A node without GPUs is a fake
one of the chain's GPU count and the judge's GPU after them. CPUs are not rehearsed: every stage asks for
none, so that GPUs alone decide what runs at once, as on a GPU node with CPUs to spare.
"""

from __future__ import annotations

import json
import math
import os
import sys
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from lazymem.chain.driver import jobs
from lazymem.chain.fingerprint import composer, stage_config
from lazymem.chain.plan import Decision
from lazymem.chain.preflight import judge_gpu
from lazymem.chain.process import Job
from lazymem.chain.record import StageRecord
from lazymem.chain.schedule import Gate, cluster, infeasible, pool, run_jobs
from lazymem.chain.stages import Stage, fill, output_paths, parse
from lazymem.llm.backends import gpu_count

LIMIT_S = 60.0  # the whole rehearsal; then the stages are stopped
HOLD_S = 1.0  # how long each probe holds its GPUs
STOP_S = 5.0  # a probe's grace after SIGTERM

# argv: the file it writes, the seconds it holds, "ray" to start a Ray of its own as VERL does
# (ray_kwargs.ray_init.address=local, lazymem/train/grpo/verl) and ask a worker for its Python
PROBE = """
import json, os, sys, time
out, hold, own_ray = sys.argv[1], float(sys.argv[2]), sys.argv[3] == "ray"
start = time.time()
seen = {"cuda": os.environ.get("CUDA_VISIBLE_DEVICES"), "python": sys.executable}
if own_ray:
    try:
        import ray
        ray.init(address="local", num_cpus=1, include_dashboard=False, object_store_memory=75 * 1024 * 1024)
        try:
            seen["worker"] = ray.get(ray.remote(lambda: sys.executable).remote(), timeout=60)
        finally:
            ray.shutdown()
    except Exception as e:
        seen["ray_error"] = f"{type(e).__name__}: {e}".splitlines()[0]
time.sleep(max(0.0, start + hold - time.time()))
with open(out, "w") as f:
    json.dump({**seen, "start": start, "end": time.time()}, f)
"""


@dataclass(frozen=True)
class Row:
    """One line of gpu_check's table (lazymem.tasks.doctor.Check's fields); ok None: information."""

    name: str
    ok: bool | None
    detail: str
    fix: str = ""


@dataclass(frozen=True)
class Node:
    visible: str | None  # the CUDA_VISIBLE_DEVICES Ray's node starts with (None: this process's)
    gpus: int  # the GPUs in Ray's pool
    shared: tuple[str, ...]  # the reserved GPUs (the judge's), kept out of the pool
    fake: bool


def node(chain: Mapping, stages: Sequence[Stage]) -> Node:
    """The node the rehearsal schedules on: this one's GPUs, or without any a fake node of the most GPUs a
    stage asks for and the reserved ones. With no GPU reserved (placement.train.reward_judge unset), the
    judge's is where the GRPO stage's plan derives it: the GPU after its own."""
    reserved = [g for g in chain["ray"].get("reserved_gpus") or [] if g is not None]
    seeing = [s.gpus for s in stages if s.sees_reserved]
    if not reserved and seeing:
        reserved = [math.ceil(max(seeing))]
    ray_cfg = {"address": None, "num_gpus": None, "reserved_gpus": reserved}
    if gpu_count():
        return Node(*pool(ray_cfg), fake=False)
    need = math.ceil(max((s.gpus for s in stages), default=0))
    total = max([need + len(reserved), *(g + 1 for g in reserved if isinstance(g, int))])
    devices = ",".join(str(i) for i in range(total))
    visible, gpus, shared = pool({**ray_cfg, "num_gpus": total}, devices)
    return Node(visible or devices, gpus, shared, fake=True)


def probe_jobs(
    chain: Mapping, stages: Sequence[Stage], shared: tuple[str, ...], python: str | None, folder: Path
) -> list[Job]:
    """The driver's jobs of every stage, each with the probe for its command; a stage with `sees_reserved`
    runs it in `python` with a Ray of its own (None: in this Python, without)."""
    decisions = [Decision(s, "run", "rehearsal") for s in stages]
    sees = {s.name: s.sees_reserved for s in stages}
    found = []
    for job in jobs(decisions, folder, dict(chain), {}, shared):
        own_ray = python is not None and sees[job.name]
        cmd = (python if own_ray else sys.executable, "-c", PROBE, str(folder / f"{job.name}.json"))
        found.append(
            replace(job, cmd=(*cmd, str(HOLD_S), "ray" if own_ray else ""), cpus=0, stop_timeout_s=STOP_S)
        )
    return found


def run(todo: Sequence[Job], folder: Path, limit_s: float) -> tuple[dict[str, StageRecord], bool]:
    """The probes on the connected Ray, stopped through the chain's gate after `limit_s`; their outcomes,
    and whether the time ran out."""
    gate_dir = folder / ".gate"
    late: list[bool] = []

    def stop() -> None:
        late.append(True)
        Gate(str(gate_dir)).close(stop=True)

    timer = threading.Timer(limit_s, stop)
    timer.daemon = True
    timer.start()
    try:
        return run_jobs(todo, lambda record: None, STOP_S, gate_dir), bool(late)
    finally:
        timer.cancel()


def _held(stage: Stage, seen: dict, shared: tuple[str, ...]) -> tuple[list[str], list[str]]:
    """The GPUs the stage held as its own, and what was wrong with what it saw."""
    cuda = [g for g in (seen.get("cuda") or "").split(",") if g]
    tail = list(shared) if stage.sees_reserved else []
    own = cuda[: len(cuda) - len(tail)]
    found = []
    if cuda[len(own) :] != tail:
        found.append(f"{stage.name} saw {','.join(cuda) or 'no GPU'}, not the reserved {','.join(tail)} last")
        own = [g for g in cuda if g not in tail]
    if leak := [g for g in own if g in shared]:
        found.append(f"{stage.name} saw the reserved GPU {','.join(leak)}, kept for the sees_reserved stage")
    if len(own) != math.ceil(stage.gpus):
        found.append(
            f"{stage.name} asked for {stage.gpus:g} GPUs and held {len(own)} ({','.join(own) or '-'})"
        )
    return own, found


def scheduling(
    name: str,
    stages: Sequence[Stage],
    seen: Mapping[str, dict],
    records: Mapping[str, StageRecord],
    at: Node,
    wrong: Sequence[str] = (),
) -> Row:
    """Every stage held the GPUs it asked for, no GPU was held by two stages at once (fractions of a GPU
    share it by design), and only the stages with `sees_reserved` saw the reserved GPUs, after their own.
    `seen`: each probe's notes; `records`: each stage's outcome, for those without notes; `wrong`: what is
    wrong already."""
    found, held = list(wrong), {}
    for s in stages:
        if s.name not in seen:
            r = records.get(s.name)
            found.append(
                f"{s.name} {r.status if r else 'did not run'}" + (f" ({r.error})" if r and r.error else "")
            )
            continue
        own, bad = _held(s, seen[s.name], at.shared)
        found += bad
        held[s.name] = (set(own), seen[s.name]["start"], seen[s.name]["end"], s.gpus % 1 == 0)
    most = 0
    for i, (a, (ga, sa, ea, whole_a)) in enumerate(held.items()):
        if ga:  # the GPU stages running when this one started, itself included
            most = max(most, sum(1 for g, start, end, _ in held.values() if g and start <= sa < end))
        for b, (gb, sb, eb, whole_b) in list(held.items())[i + 1 :]:
            if (both := ga & gb) and sa < eb and sb < ea and whole_a and whole_b:
                found.append(f"{a} and {b} held GPU {sorted(both)[0]} at the same time")
    where = f"{len(stages)} stages on {'fake GPUs' if at.fake else 'GPUs'} {at.visible or '(all visible)'}"
    if at.shared:
        judged = ", ".join(s.name for s in stages if s.sees_reserved) or "no stage"
        where += f" (and {','.join(at.shared)}, reserved: {judged} sees it after its own)"
    if found:
        return Row(
            name,
            False,
            f"{where}: " + "; ".join(found),
            "the stages' gpus and sees_reserved (chain.stages), or the chain's scheduling (lazymem/chain/)",
        )
    return Row(
        name, True, f"{where}: each held the GPUs it asked for, none two at once, {most} at most together"
    )


def _same(a: str, b: str) -> bool:
    """One interpreter: a venv's bin/python links to the base Python, as the chain's own venv's does, so
    only the folders are resolved, not the link itself."""
    return Path(a).parent.resolve() / Path(a).name == Path(b).parent.resolve() / Path(b).name


def workers(name: str, stages: Sequence[Stage], seen: Mapping[str, dict], python: str | None) -> Row:
    """The Ray of each stage with `sees_reserved` ran its workers in the engine's Python (ray 2.60 starts a
    node's workers with the Python that started the node: _private/services.py:1814-1817)."""
    grpo = [s.name for s in stages if s.sees_reserved]
    if not grpo:
        return Row(name, None, "no stage sees the reserved GPU (sees_reserved): none starts a Ray of its own")
    if python is None:
        return Row(
            name, None, "not rehearsed: the engine's Python is not here (the engine's environment row)"
        )
    found = []
    for stage in grpo:
        probe = seen.get(stage) or {}
        worker = probe.get("worker")
        if worker is None:
            found.append(f"{stage}: {probe.get('ray_error') or 'its probe did not finish'}")
        elif not _same(worker, python):
            found.append(f"{stage}: its Ray's workers ran in {worker}, not in the engine's {python}")
    if found:
        fix = (
            "a stage's own Ray starts in its own Python, without the chain's RAY_* (lazymem/chain/process.py)"
        )
        return Row(name, False, "; ".join(found), fix)
    return Row(name, True, f"{', '.join(grpo)}: the workers of its own Ray ran in {python}")


def titles(name: str) -> tuple[str, str]:
    """The two rows' names for the chain experiment `name`."""
    return f"chain {name}: GPU scheduling", f"chain {name}: Ray workers' Python"


def engine_gpus(stages: Sequence[Stage], shared: tuple[str, ...], folder: Path) -> list[str]:
    """What the chain's checks say of each stage with `sees_reserved`, from its config composed as the chain
    composes it: its `gpus` against its engine's, the judge's GPU in its plan (preflight.judge_gpu). A
    GRPO stage holding fewer GPUs than its engine takes would race the other stages for the rest (N17),
    which its probe, seeing only the GPUs it holds, cannot show."""
    outputs = output_paths(list(stages), folder, {})
    found = []
    with composer() as compose:
        for s in (s for s in stages if s.sees_reserved):
            cfg, _ = stage_config(compose, s.name, fill(s, outputs, folder))
            found += [f"{s.name} {m}" for m in judge_gpu(Decision(s, "run", "", config=cfg), shared)]
    return found


def on_node(
    chain: Mapping,
    stages: Sequence[Stage],
    at: Node,
    python: str | None,
    folder: Path,
    name: str,
    limit_s: float,
    found: Sequence[str] = (),
) -> list[Row]:
    """The rehearsal on the connected Ray, whose node is `at`: the probes' jobs, run, and judged (`found`:
    what is wrong already, from engine_gpus)."""
    sched, work = titles(name)
    folder.mkdir(parents=True, exist_ok=True)
    todo = probe_jobs(chain, stages, at.shared, python, folder)
    if short := infeasible(todo):  # Ray would wait for them forever
        fix = "run it on a node with the GPUs the chain asks for"
        return [
            Row(sched, False, "; ".join(short), fix),
            Row(work, None, "not rehearsed: the chain does not fit"),
        ]
    records, late = run(todo, folder, limit_s)
    seen = {
        s.name: json.loads((folder / f"{s.name}.json").read_text(encoding="utf-8"))
        for s in stages
        if (folder / f"{s.name}.json").is_file()
    }
    rows = [scheduling(sched, stages, seen, records, at, found), workers(work, stages, seen, python)]
    if late:  # the stages it stopped are named in the rows
        rows = [replace(r, detail=f"stopped at the time limit ({limit_s:g} s): {r.detail}") for r in rows]
    return [replace(r, fix=f"{r.fix}; the probes' logs: {folder}") if r.ok is False else r for r in rows]


def rehearse(
    chain: Mapping, python: str | None, folder: Path, name: str = "chain", limit_s: float = LIMIT_S
) -> list[Row]:
    """The chain's scheduling and its GRPO stage's Ray workers, as two rows, on a Ray of its own; a rehearsal
    that fails is a failed row, never an exception. `chain`: the resolved `chain` node of a chain experiment;
    `python`: the GRPO engine's (absent: its workers are not rehearsed); `folder`: the probes' notes and
    logs."""
    if python is not None:
        python = os.path.abspath(os.path.expanduser(python))
        python = python if Path(python).exists() else None
    try:
        stages = parse(chain["stages"], chain["cpus_per_stage"], chain["overrides"])
        at = node(chain, stages)
        found = engine_gpus(stages, at.shared, folder)
        with cluster(None, chain["ray"]["num_cpus"], at.gpus, at.visible):
            return on_node(chain, stages, at, python, folder, name, limit_s, found)
    except Exception as e:  # a config that does not parse, a Ray that does not start: a row, not a crash
        why = f"the rehearsal did not run: {type(e).__name__}: {' '.join(str(e).split())}"
        sched, work = titles(name)
        return [Row(sched, False, why, f"see {folder}"), Row(work, None, "not rehearsed")]
