"""A chain from its settings to its end: the stages parsed, the plan printed (what runs, and why), every
problem the running stages would stop on listed before anything starts, then the stages run on Ray with
chain.json kept up to date. task=chain (lazymem/tasks/chain.py) is its entry and hands it the task registry's
lookup, `task_of`.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

from lazymem.chain import preflight
from lazymem.chain.fingerprint import composer, config_digest
from lazymem.chain.plan import Decision, StageTask, command, plan, render, supersede
from lazymem.chain.process import Job
from lazymem.chain.record import ChainRecord, previous, resume_command, top
from lazymem.chain.schedule import cluster, infeasible, pool, run_jobs
from lazymem.chain.stages import given_paths, output_paths, parse, scope
from lazymem.preflight import stop
from lazymem.validate import ConfigError


def run_chain(
    chain: dict, chain_dir: Path, config: Mapping, resume: bool, task_of: Callable[[str], StageTask | None]
) -> dict:
    """`chain`: the resolved `chain` node, whose `overrides` every stage gets; `config`: the chain's own
    resolved config, whose digest chain.json records; `resume`: continue the chain.json in `chain_dir`."""
    stages = parse(chain["stages"], chain["cpus_per_stage"], chain["overrides"])
    given = given_paths(chain["given"], stages)
    covered = scope(stages, chain["from"], chain["until"], given)
    prev = previous(chain_dir) if resume else {}
    with composer() as compose:
        decisions = plan(stages, covered, given, chain_dir, prev, compose, task_of, chain["from"])
    print(render(decisions), flush=True)
    actions = {d.stage.name: d.action for d in decisions}
    visible, gpus, shared = pool(chain["ray"])
    found = preflight.problems(decisions, chain_dir, gpus, shared)
    if chain["dry_run"]:
        if found:
            print("the chain would stop on:\n" + "\n".join(f"  - {m}" for m in found))
        return {"dry_run": True, "actions": actions, "problems": found}
    stop(found)
    entries = [d.record(chain_dir, prev.get(d.stage.name)) for d in decisions]
    record = ChainRecord(chain_dir, top(config_digest(config), chain["datasets"], chain_dir), entries)
    status = "failed"
    try:
        _run(decisions, record, chain, given, (visible, gpus, shared))
        status = "ok"
    except KeyboardInterrupt:
        status = "interrupted"
        print(
            f"chain interrupted; continue it with:\n  {resume_command(chain_dir)}",
            file=sys.stderr,
            flush=True,
        )
        raise
    finally:
        record.finish(status)
    return {"actions": actions, "statuses": {s.name: s.status for s in record.stages.values()}}


def _run(decisions: Sequence[Decision], record: ChainRecord, chain: dict, given: Mapping, gpu_pool) -> None:
    """The stages that run, on the chain's Ray; a SystemExit naming each stage that failed."""
    chain_dir = record.path.parent
    todo = [d for d in decisions if d.runs]
    for d in todo:
        if d.action == "run":
            supersede(d.stage, chain_dir)
    if not todo:
        return  # nothing to run: no cluster started
    visible, gpus, shared = gpu_pool
    ray_cfg = chain["ray"]
    num_gpus = ray_cfg["num_gpus"] if visible is None else gpus
    with cluster(ray_cfg["address"], ray_cfg["num_cpus"], num_gpus, visible):
        stage_jobs = jobs(decisions, chain_dir, chain, given, shared)
        problems = [] if ray_cfg["address"] else infeasible(stage_jobs)
        if problems:
            raise ConfigError(problems)
        results = run_jobs(stage_jobs, record.update, float(chain["stop_timeout_s"]), chain_dir / ".gate")
    failed = [name for name, r in results.items() if r.status == "failed"]
    if failed:
        raise SystemExit(record.failure(failed))


def jobs(
    decisions: Sequence[Decision], chain_dir: Path, chain: dict, given: Mapping, shared: tuple[str, ...] = ()
) -> list[Job]:
    """The Ray jobs of the stages that run. A stage after this chain's split that does not read the test
    split gets the test-id guard on its task's training files; `shared`: the GPUs outside Ray's pool that
    the stages with `sees_reserved` see."""
    outputs = output_paths([d.stage for d in decisions], chain_dir, given)
    # the test-id guard needs the chain's own split (a stage named split that this chain has or made)
    split = next((outputs["split"] for d in decisions if d.stage.name == "split" and d.action != "out"), None)
    deps = {d.stage.name: d.stage.deps for d in decisions}

    def reads_split(name: str) -> bool:  # the guard checks the stages downstream of the split
        return any(dep == "split" or reads_split(dep) for dep in deps[name])

    found = []
    for d in decisions:
        if not d.runs:
            continue
        s = d.stage
        guard = split if split and not s.reads_test and reads_split(s.name) else None
        found.append(
            Job(
                name=s.name,
                cmd=tuple(command(d, chain_dir)),
                cwd=os.getcwd(),
                run_dir=str(s.run_dir(chain_dir)),
                log=str(s.log(chain_dir)),
                gpus=s.gpus,
                cpus=s.cpus,
                deps=s.deps,
                split=str(guard) if guard else None,
                training_files=d.task.training_files if d.task else (),
                shared_gpus=shared if s.sees_reserved else (),
                stop_timeout_s=float(chain["stop_timeout_s"]),
            )
        )
    return found
