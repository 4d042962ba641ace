"""What this run does with each stage, and why: the resume decisions.

- `run`: not run before, changed (its fingerprint: config, engine or an input), forced by chain.from, or
  its run dir gone; an earlier run dir of a changed stage is moved aside (superseded/, nothing is lost);
- `continue`: interrupted or failed earlier with an unchanged fingerprint: `resume=true` in its own dir;
- `skip`: finished earlier (ok or skipped) with an unchanged fingerprint: its run dir stays untouched;
- `given`: its output is chain.given's path; `before`: before chain.from, its earlier result stands;
  `out`: not in this run (after chain.until, or needed only by given stages).
A changed stage changes its dependents' input digests, so they all rerun.
"""

from __future__ import annotations

import shutil
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime
from pathlib import Path
from typing import Any, Protocol

from lazymem.chain.fingerprint import changes, config_digest, engine, fingerprint, given_input, stage_config
from lazymem.chain.record import FINISHED, StageRecord
from lazymem.chain.stages import Scope, Stage, fill, output_paths
from lazymem.rundir import result_changes, yaml_load
from lazymem.validate import ConfigError

SHOWN = {"before": "skip", "out": "skip"}  # how the dry run names the actions that run nothing


class StageTask(Protocol):
    """What the chain asks of a stage's task: lazymem.tasks.contract.Task's fields. The tasks sit above the
    chain in lazymem.LAYERS, so the chain's caller passes the lookup (`task_of`, the task registry's)."""

    problems: Callable[[Any], list[str]] | None
    versions: Callable[[Any], Mapping[str, str]] | None
    training_files: tuple[str, ...]


@dataclass
class Decision:
    stage: Stage
    action: str
    reason: str
    fingerprint: dict | None = None
    overrides: list[str] = field(default_factory=list)  # as run, without resume
    given: Path | None = None
    config: object = None  # the stage's composed config (DictConfig), for the chain's preflight
    task: StageTask | None = None  # its config's task (None: no such task; the stage itself says so)

    @property
    def runs(self) -> bool:
        return self.action in ("run", "continue")

    def record(self, chain_dir: Path, old: StageRecord | None) -> StageRecord:
        """The stage's chain.json entry before anything runs (`old`: the earlier run's)."""
        if self.action in ("before", "out") and old:
            return old
        s = self.stage
        new = StageRecord(
            name=s.name,
            reason=self.reason,
            action=self.action,
            run_dir=str(s.run_dir(chain_dir)),
            log=str(s.log(chain_dir)),
            fingerprint=self.fingerprint,
        )
        if self.action == "skip":  # as it finished earlier
            return replace(
                new, status="skipped", started=old.started, ended=old.ended, duration_s=old.duration_s
            )
        if self.action == "given":
            return replace(new, status="skipped", given=str(self.given), run_dir=None, log=None)
        return new


def _config_detail(run_dir: Path, resolved: Mapping) -> str:
    stored = run_dir / "config.yaml"
    if not stored.exists():
        return "config"
    changed = result_changes(yaml_load(stored), dict(resolved))
    more = f", +{len(changed) - 3} more" if len(changed) > 3 else ""
    return f"config ({'; '.join(changed[:3])}{more})" if changed else "config"


def _decide(fp: dict, prev: StageRecord | None, run_dir: Path, resolved: Mapping) -> tuple[str, str]:
    if not prev or not prev.fingerprint or prev.status in (None, "pending"):
        return "run", "not run before"
    changed = changes(prev.fingerprint, fp)
    if changed:
        parts = [_config_detail(run_dir, resolved) if c == "config" else c for c in changed]
        return "run", f"changed: {', '.join(parts)}"
    if prev.status in FINISHED:
        if run_dir.is_dir():
            return "skip", f"unchanged since {prev.ended or 'its last run'}"
        return "run", "unchanged, but its run dir is gone"
    if (run_dir / "config.yaml").exists():
        return "continue", f"{prev.status} earlier, unchanged: resume=true in its run dir"
    return "run", f"{prev.status} earlier, before its run began"


def _finished(record: StageRecord | None) -> bool:
    """Whether an earlier run's stage finished, so that its outputs and fingerprint stand."""
    return record is not None and record.status in FINISHED and bool(record.fingerprint)


def _finished_digest(name: str, user: str, prev: Mapping[str, StageRecord], first: str) -> str:
    record = prev.get(name)
    if not _finished(record):
        raise ConfigError(
            [
                f"chain.from = {first!r}: stage {name!r}, which {user!r} needs, has not finished here "
                f"(status {record.status if record else 'none'}): run it first, or continue this chain with "
                "resume=true in its hydra.run.dir"
            ]
        )
    return record.fingerprint["digest"]


def plan(
    stages: Sequence[Stage],
    scope: Scope,
    given: Mapping[str, Path],
    chain_dir: Path,
    prev: Mapping[str, StageRecord],
    compose: Callable[[Sequence[str]], object],
    task_of: Callable[[str], StageTask | None],
    first: str | None = None,
) -> list[Decision]:
    """One decision per stage, in the chain's order. `prev`: the stages of the chain.json an earlier run
    left ({} without resume); `task_of(name)`: the task called name, or None; `first`: chain.from, whose
    stages run anew."""
    outputs = output_paths(list(stages), chain_dir, given)
    digests: dict[str, object] = {}  # what a dependent records as this stage's input
    decisions = []
    for stage in stages:
        name = stage.name
        if name in given:
            digests[name] = given_input(given[name])
            decisions.append(Decision(stage, "given", f"chain.given: {given[name]}", given=given[name]))
            continue
        if name in scope.out:
            decisions.append(Decision(stage, "out", scope.out[name]))
            continue
        if name in scope.before:
            record = prev.get(name)
            if _finished(record):
                digests[name] = record.fingerprint["digest"]
            reason = f"before chain.from={first} (status {record.status if record else 'none'})"
            decisions.append(Decision(stage, "before", reason))
            continue
        inputs = {}
        for dep in stage.deps:
            inputs[dep] = digests[dep] if dep in digests else _finished_digest(dep, name, prev, first)
        overrides = fill(stage, outputs, chain_dir)
        cfg, resolved = stage_config(compose, name, overrides)
        if (resolved.get("logger") or {}).get("backend", "none") != "none":
            overrides.append(f"++logger.group={chain_dir.name}")  # one W&B group per chain
        task = task_of(str(cfg.task))
        fp = fingerprint(config_digest(resolved), engine(cfg, task.versions if task else None), inputs)
        digests[name] = fp["digest"]
        if first:
            action, reason = "run", f"chain.from={first}"
        else:
            action, reason = _decide(fp, prev.get(name), stage.run_dir(chain_dir), resolved)
        decisions.append(Decision(stage, action, reason, fp, overrides, config=cfg, task=task))
    return decisions


def render(decisions: Sequence[Decision]) -> str:
    width = max(len(d.stage.name) for d in decisions)
    lines = [f"{SHOWN.get(d.action, d.action):9} {d.stage.name:{width}}  {d.reason}" for d in decisions]
    return "\n".join(lines)


def command(decision: Decision, chain_dir: Path) -> list[str]:
    """The stage's lazymem.run command line (run with the chain's own Python)."""
    cmd = [sys.executable, "-m", "lazymem.run", *decision.overrides]
    if decision.action == "continue":
        cmd.append("resume=true")
    return [*cmd, f"hydra.run.dir={decision.stage.run_dir(chain_dir)}"]


def supersede(stage: Stage, chain_dir: Path) -> Path | None:
    """Move an earlier run dir of the stage (and its log) to <chain>/superseded/<stage>-<time>/."""
    run_dir, log = stage.run_dir(chain_dir), stage.log(chain_dir)
    if not run_dir.exists() and not log.exists():
        return None
    stamp = datetime.now().strftime("%Y%m%d-%H%M%S")
    target = chain_dir / "superseded" / f"{stage.name}-{stamp}"
    n = 1
    while target.exists():
        n += 1
        target = chain_dir / "superseded" / f"{stage.name}-{stamp}-{n}"
    target.parent.mkdir(parents=True, exist_ok=True)
    if run_dir.exists():
        shutil.move(str(run_dir), str(target))
    target.mkdir(exist_ok=True)
    if log.exists():
        shutil.move(str(log), str(target / log.name))
    return target
