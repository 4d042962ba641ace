"""The chain on Ray: each stage a Ray task holding its CPUs and GPUs, started once the tasks of the stages
it needs have returned (their ObjectRefs are its arguments), so Ray does all the scheduling; the driver
only follows the tasks with ray.wait and reports each event.

A gate, files in the chain's run directory, says whether a stage may still start (not after a failure or
a signal) and asks running stages to stop (after a signal); every task reads it before it starts its
process. It is files, not an actor, because a Ray task blocked in ray.get hands its CPUs back to the
scheduler while it waits: polling an actor let a second CPU stage start on the first one's cores. A failed
stage closes the gate: the stages that need it and those not yet started do not start, the running ones
finish.
SIGINT or SIGTERM closes it and stops the running stages (SIGTERM to each, SIGKILL after
stop_timeout_s), then :class:`lazymem.interrupt.Interrupted` goes on to the runner.
"""

from __future__ import annotations

import os
import shutil
import signal
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import ray

from lazymem.chain.process import POLL_S, Job, run_job
from lazymem.chain.record import StageRecord
from lazymem.interrupt import SIGNALS, Interrupted
from lazymem.llm.backends import gpu_count
from lazymem.rundir import now
from lazymem.validate import ConfigError

# The object store holds only the stages' outcomes (small StageRecords): Ray's minimum (75 MiB), as hydra's
# Ray launcher sets for local sweeps (hydra_plugins/hydra_ray_launcher/_core.py:36).
OBJECT_STORE_BYTES = 75 * 1024 * 1024


def _index(g) -> bool:
    return isinstance(g, int) and not isinstance(g, bool) and g >= 0


def pool(ray_cfg: dict, devices: str | None = None) -> tuple[str | None, int | None, tuple[str, ...]]:
    """The chain's local Ray's GPUs: the CUDA_VISIBLE_DEVICES it starts with (None: the environment's), their
    number, and the GPUs kept out of its pool, as CUDA_VISIBLE_DEVICES names them (chain.ray.reserved_gpus:
    positions among the visible GPUs, as placement's indices are, of a server started by hand beside the
    chain, such as GRPO's reward judge; Ray hands out only the devices its node saw at start, ray 2.60
    _private/resource_and_label_spec.py:350-377). A joined cluster's are Ray's to check: (None, None, ()).
    `devices`: the node's CUDA_VISIBLE_DEVICES (None: this process's; a rehearsal names its fake node's)."""
    if ray_cfg["address"]:
        return None, None, ()
    n = ray_cfg["num_gpus"] if ray_cfg["num_gpus"] is not None else gpu_count()
    reserved = ray_cfg.get("reserved_gpus") or []
    if not isinstance(reserved, list) or not all(g is None or _index(g) for g in reserved):
        raise ConfigError([f"chain.ray.reserved_gpus = {reserved!r}: must be a list of GPU indices or nulls"])
    env = os.environ.get("CUDA_VISIBLE_DEVICES") if devices is None else devices
    if env is None:
        visible = [str(i) for i in range(n)]
    else:
        visible = [v.strip() for v in env.split(",") if v.strip()][:n]
    shared = tuple(visible[g] for g in reserved if g is not None and g < len(visible))
    if not shared:
        return None, n, ()
    kept = [v for v in visible if v not in shared]
    return ",".join(kept), len(kept), shared


@contextmanager
def cluster(
    address: str | None, num_cpus: int | None, num_gpus: int | None, visible: str | None = None
) -> Iterator[None]:
    """A local Ray for the chain (address None: started here, without its dashboard, its stages at the
    chain's own niceness, and shut down at the end; `visible`: the CUDA_VISIBLE_DEVICES its node starts
    with, None for this process's) or the cluster at `address` ("auto", host:port)."""
    if address:
        ray.init(address=address)
    else:
        # the raylet and its workers inherit these when they start: the GPUs it may hand out, and a
        # niceness increment of 0 (Ray's default, 15, would run every stage below the chain's own
        # priority; ray 2.60 sets the same variable to 0 for a submitted job's driver,
        # dashboard/modules/job/job_manager.py:399)
        wanted = {"RAY_worker_niceness": "0"}
        if visible is not None:
            wanted["CUDA_VISIBLE_DEVICES"] = visible
        before = {k: os.environ.get(k) for k in wanted}
        os.environ.update(wanted)
        try:
            ray.init(
                num_cpus=num_cpus,
                num_gpus=num_gpus,
                include_dashboard=False,
                object_store_memory=OBJECT_STORE_BYTES,
            )
        finally:
            for key, value in before.items():
                if value is None:
                    os.environ.pop(key, None)
                else:
                    os.environ[key] = value
    try:
        yield
    finally:
        ray.shutdown()


def infeasible(jobs: Sequence[Job]) -> list[str]:
    """The stages that ask for more CPUs or GPUs than the connected cluster has (Ray would wait forever)."""
    have = ray.cluster_resources()
    found = []
    for job in jobs:
        for key, want in (("cpus", job.cpus), ("gpus", job.gpus)):
            total = have.get(key[:-1].upper(), 0)
            if want > total:
                found.append(f"chain.stages.{job.name}.{key} = {want:g}: the Ray cluster has {total:g}")
    return found


@dataclass(frozen=True)
class Gate:
    """The chain's word to its stages: `closed` (start nothing more), `stop` (stop what runs) and one file
    per stage that began, in a folder every node sees (the chain's run directory)."""

    folder: str

    def open(self) -> None:
        shutil.rmtree(self.folder, ignore_errors=True)
        (Path(self.folder) / "began").mkdir(parents=True)

    def begin(self, name: str) -> bool:
        if (Path(self.folder) / "closed").exists():
            return False
        (Path(self.folder) / "began" / name).write_text(now(), encoding="utf-8")
        return True

    def close(self, stop: bool = False) -> None:
        (Path(self.folder) / "closed").touch()
        if stop:
            (Path(self.folder) / "stop").touch()

    def stopping(self) -> bool:
        return (Path(self.folder) / "stop").exists()

    def began(self) -> dict[str, str]:
        return {p.name: p.read_text(encoding="utf-8") for p in (Path(self.folder) / "began").iterdir()}


def _stage_task(job: Job, gate, *upstream: StageRecord) -> StageRecord:
    waiting_on = [u.name for u in upstream if u.status != "ok"]
    if waiting_on:
        return StageRecord(job.name, "pending", error=f"not started: {', '.join(waiting_on)} did not finish")
    if not gate.begin(job.name):
        return StageRecord(job.name, "pending", error="not started: the chain stopped")
    return run_job(job, gate.stopping, ray.get_gpu_ids())


stage_task = ray.remote(max_retries=0)(_stage_task)


def _outcome(ref, name: str) -> StageRecord:
    try:
        return ray.get(ref)
    except ray.exceptions.RayError as e:  # the task itself failed (its worker died, a bug): one line
        first = next((x for x in str(e).splitlines() if x.strip()), type(e).__name__)
        return StageRecord(name, "failed", error=f"{type(e).__name__}: {first.strip()}")


@contextmanager
def _signals_noted() -> Iterator[list[int]]:
    """SIGINT / SIGTERM only noted (the list) while the driver waits: it stops the stages, then raises."""
    noted: list[int] = []
    previous = {s: signal.getsignal(s) for s in SIGNALS}
    for s in SIGNALS:
        signal.signal(s, lambda signum, frame: noted.append(signum))
    try:
        yield noted
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)


def run_jobs(
    jobs: Sequence[Job], on_event: Callable[[StageRecord], None], stop_timeout_s: float, gate_dir: Path
) -> dict[str, StageRecord]:
    """Run `jobs` (in an order where each job's deps come first) on the connected Ray; on_event(record)
    for each stage that starts (status running, started) and each that returns (its outcome). The gate's
    files live in `gate_dir`. Returns the outcomes by name; after a signal, raises Interrupted once the
    stages have stopped."""
    gate = Gate(str(gate_dir))
    gate.open()
    refs: dict[str, ray.ObjectRef] = {}
    for job in jobs:
        upstream = [refs[d] for d in job.deps if d in refs]
        options = {"num_cpus": job.cpus, "num_gpus": job.gpus, "name": f"chain:{job.name}"}
        refs[job.name] = stage_task.options(**options).remote(job, gate, *upstream)
    waiting = {ref: name for name, ref in refs.items()}
    results: dict[str, StageRecord] = {}
    running: set[str] = set()
    deadline = None
    with _signals_noted() as noted:
        while waiting and (deadline is None or time.monotonic() < deadline):
            if noted and deadline is None:
                gate.close(stop=True)
                deadline = time.monotonic() + stop_timeout_s + 10
            if len(noted) > 1:  # a second signal: stop waiting, the shutdown kills what is left
                break
            ready, _ = ray.wait(list(waiting), num_returns=1, timeout=POLL_S)
            for ref in ready:
                name = waiting.pop(ref)
                results[name] = _outcome(ref, name)
                on_event(results[name])
                if results[name].status == "failed":
                    gate.close()
            for name, started in gate.began().items():
                if name not in running and name not in results:
                    running.add(name)
                    on_event(StageRecord(name, "running", started=started))
    for name in waiting.values():  # given up on after a signal
        results[name] = StageRecord(name, "interrupted" if name in running else "pending")
        on_event(results[name])
    if noted:
        raise Interrupted(noted[0])
    return results
