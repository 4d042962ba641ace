"""task=chain: run `chain.stages`, each an ordinary lazymem run in <chain run dir>/<stage>/, on Ray, with
chain.json recording every stage; resume=true in the same hydra.run.dir skips the unchanged stages
(lazymem/chain: stages, plan, fingerprint, record, schedule)."""

from __future__ import annotations

import importlib
import os
import sys
from pathlib import Path

from hydra.core.hydra_config import HydraConfig
from omegaconf import OmegaConf

from lazymem.chain import plan as planning
from lazymem.chain import preflight
from lazymem.chain.fingerprint import composer, config_digest
from lazymem.chain.process import Job
from lazymem.chain.record import ChainRecord, previous, resume_command, top
from lazymem.chain.schedule import cluster, infeasible, run_jobs
from lazymem.chain.stages import given_paths, output_paths, parse, scope
from lazymem.llm.backends import gpu_count
from lazymem.preflight import stop
from lazymem.rundir import resolved_config
from lazymem.validate import ConfigError


def _check(task: str):
    """Task `task`'s check before a chain starts (its module's `problems(cfg)`), or None."""
    try:
        module = importlib.import_module(f"lazymem.tasks.{task}")
    except ModuleNotFoundError:
        return None  # the stage itself reports an unknown task
    return getattr(module, "problems", None)


def _index(g) -> bool:
    return isinstance(g, int) and not isinstance(g, bool) and g >= 0


def _pool(ray_cfg: dict) -> tuple[str | None, int | None, tuple[str, ...]]:
    """The chain's local Ray's GPUs: the CUDA_VISIBLE_DEVICES it starts with (None: the environment's), their
    number, and the GPUs kept out of its pool, as CUDA_VISIBLE_DEVICES names them (chain.ray.reserved_gpus:
    positions among the visible GPUs, as placement's indices are, of a server started by hand beside the
    chain, such as GRPO's reward judge; Ray hands out only the devices its node saw at start, ray 2.60
    _private/resource_and_label_spec.py:350-377). A joined cluster's are Ray's to check: (None, None, ())."""
    if ray_cfg["address"]:
        return None, None, ()
    n = ray_cfg["num_gpus"] if ray_cfg["num_gpus"] is not None else gpu_count()
    reserved = ray_cfg.get("reserved_gpus") or []
    if not isinstance(reserved, list) or not all(g is None or _index(g) for g in reserved):
        raise ConfigError([f"chain.ray.reserved_gpus = {reserved!r}: must be a list of GPU indices or nulls"])
    env = os.environ.get("CUDA_VISIBLE_DEVICES")
    if env is None:
        visible = [str(i) for i in range(n)]
    else:
        visible = [v.strip() for v in env.split(",") if v.strip()][:n]
    shared = tuple(visible[g] for g in reserved if g is not None and g < len(visible))
    if not shared:
        return None, n, ()
    kept = [v for v in visible if v not in shared]
    return ",".join(kept), len(kept), shared


def _record(d: planning.Decision, chain_dir: Path, prev: dict) -> dict:
    """The stage's chain.json entry before anything runs."""
    old = prev.get(d.stage.name)
    if d.action in ("before", "out") and old:
        return old
    entry = {"name": d.stage.name, "status": "pending", "reason": d.reason, "action": d.action}
    entry |= {"run_dir": str(d.stage.run_dir(chain_dir)), "log": str(d.stage.log(chain_dir))}
    entry |= {"started": None, "ended": None, "duration_s": None, "error": None, "fingerprint": d.fingerprint}
    if d.action == "skip":
        kept = ("started", "ended", "duration_s")
        entry |= {"status": "skipped", **{k: old.get(k) for k in kept}}
    if d.action == "given":
        entry |= {"status": "skipped", "given": str(d.given), "run_dir": None, "log": None}
    return entry


def _jobs(decisions, chain_dir: Path, chain: dict, given: dict, shared: tuple[str, ...] = ()) -> list[Job]:
    outputs = output_paths([d.stage for d in decisions], chain_dir, given)
    # the test-id guard needs the chain's own split (a stage named split that this chain has or made)
    split = next((outputs["split"] for d in decisions if d.stage.name == "split" and d.action != "out"), None)
    deps = {d.stage.name: d.stage.deps for d in decisions}

    def reads_split(name: str) -> bool:  # the guard checks the stages downstream of the split
        return any(dep == "split" or reads_split(dep) for dep in deps[name])

    jobs = []
    for d in decisions:
        if not d.runs:
            continue
        s = d.stage
        guard = split if split and not s.reads_test and reads_split(s.name) else None
        jobs.append(
            Job(
                name=s.name,
                cmd=tuple(planning.command(d, chain_dir)),
                cwd=os.getcwd(),
                run_dir=str(s.run_dir(chain_dir)),
                log=str(s.log(chain_dir)),
                gpus=s.gpus,
                cpus=s.cpus,
                deps=s.deps,
                split=str(guard) if guard else None,
                shared_gpus=shared if s.sees_reserved else (),
                stop_timeout_s=float(chain["stop_timeout_s"]),
            )
        )
    return jobs


def _failure(record: ChainRecord, failed: list[str], chain_dir: Path) -> str:
    lines = []
    for name in failed:
        stage = record.stage(name)
        lines.append(f"chain stage '{name}' failed: {stage.get('error')} (log: {stage.get('log')})")
    how = f"fix it, then continue the chain with: {resume_command(chain_dir)}"
    return "error: " + "\n".join(lines) + f"\n{how}"


def run(cfg, run) -> dict:
    chain = OmegaConf.to_container(cfg.chain, resolve=True)
    chain_dir = run.dir.absolute()
    # the chain's own tracking choice (logger=none, logger=wandb) reaches every stage, then chain.overrides
    common = [f"logger={HydraConfig.get().runtime.choices.logger}", *chain["overrides"]]
    stages = parse(chain["stages"], chain["cpus_per_stage"], common)
    given = given_paths(chain["given"], stages)
    covered = scope(stages, chain["from"], chain["until"], given)
    prev = previous(chain_dir) if cfg.resume else {}
    with composer() as compose:
        decisions = planning.plan(stages, covered, given, chain_dir, prev, compose, chain["from"])
    print(planning.render(decisions), flush=True)
    actions = {d.stage.name: d.action for d in decisions}
    visible, gpus, shared = _pool(chain["ray"])
    found = preflight.problems(decisions, _check, chain_dir, gpus)
    if chain["dry_run"]:
        if found:
            print("the chain would stop on:\n" + "\n".join(f"  - {m}" for m in found))
        return {"dry_run": True, "actions": actions, "problems": found}
    stop(found)
    config = {k: v for k, v in resolved_config(cfg).items() if k != "resume"}
    entries = [_record(d, chain_dir, prev) for d in decisions]
    record = ChainRecord(chain_dir, top(config_digest(config), chain["datasets"], chain_dir), entries)

    def on_event(name: str, event: dict) -> None:
        record.update(name, **{k: v for k, v in event.items() if k != "name"})

    status = "failed"
    try:
        todo = [d for d in decisions if d.runs]
        for d in todo:
            if d.action == "run":
                planning.supersede(d.stage, chain_dir)
        results = {}
        if todo:
            ray_cfg = chain["ray"]
            num_gpus = ray_cfg["num_gpus"] if visible is None else gpus
            with cluster(ray_cfg["address"], ray_cfg["num_cpus"], num_gpus, visible):
                jobs = _jobs(decisions, chain_dir, chain, given, shared)
                problems = [] if ray_cfg["address"] else infeasible(jobs)
                if problems:
                    raise ConfigError(problems)
                results = run_jobs(jobs, on_event, float(chain["stop_timeout_s"]), chain_dir / ".gate")
        failed = [name for name, r in results.items() if r["status"] == "failed"]
        if failed:
            raise SystemExit(_failure(record, failed, chain_dir))
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
    return {"actions": actions, "statuses": {s["name"]: s["status"] for s in record.data["stages"]}}
