"""The chain's stages from `chain.stages`: typed records, their placeholders and dependencies, the order
they run in, and which of them this run covers (`chain.from`, `chain.until`, `chain.given`).

Bad input is a ConfigError naming the key: an unknown placeholder or stage, a cycle, `from`/`until`
naming no stage, a `given` path that does not exist.
"""

from __future__ import annotations

import heapq
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from lazymem.validate import ConfigError

# {name} in an override; `${...}` (an OmegaConf interpolation) is left alone
PLACEHOLDER = re.compile(r"(?<!\$)\{([A-Za-z_][\w-]*)\}")
OWN = ("here", "chain")  # placeholders that name no stage
KEYS = ("overrides", "gpus", "cpus", "output", "after", "reads_test", "sees_reserved")


@dataclass(frozen=True)
class Stage:
    name: str
    overrides: tuple[str, ...]
    gpus: float
    cpus: float
    output: str | None
    after: tuple[str, ...]
    reads_test: bool
    sees_reserved: bool  # chain.ray.reserved_gpus are visible to it too, after its own GPUs
    deps: tuple[str, ...]  # referenced in the overrides or named in `after`, in the chain's order

    def run_dir(self, chain_dir: Path) -> Path:
        return chain_dir / self.name

    def log(self, chain_dir: Path) -> Path:
        return chain_dir / f"{self.name}.log"


def _number(key: str, value, *, nullable: bool = False) -> float | None:
    if value is None and nullable:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or value < 0:
        raise ConfigError([f"{key} = {value!r}: must be a number >= 0" + (" or null" if nullable else "")])
    return value


def _stage(name: str, spec, default_cpus: float, common: list[str]) -> tuple[Stage, list[str]]:
    key = f"chain.stages.{name}"
    if not isinstance(spec, Mapping):
        raise ConfigError([f"{key} = {spec!r}: must be a mapping with `overrides` ({', '.join(KEYS)})"])
    unknown = sorted(set(spec) - set(KEYS))
    if unknown:
        raise ConfigError([f"{key}.{unknown[0]}: unknown key; a stage has {', '.join(KEYS)}"])
    overrides, after = spec.get("overrides") or [], spec.get("after") or []
    for k, value in (("overrides", overrides), ("after", after)):
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise ConfigError([f"{key}.{k} = {value!r}: must be a list of strings"])
    overrides = [*overrides, *common]
    output = spec.get("output")
    if output is not None and (not isinstance(output, str) or Path(output).is_absolute()):
        raise ConfigError([f"{key}.output = {output!r}: must be a path relative to the stage's run dir"])
    cpus = _number(f"{key}.cpus", spec.get("cpus"), nullable=True)
    gpus = _number(f"{key}.gpus", spec.get("gpus", 0))
    stage = Stage(
        name=name,
        overrides=tuple(overrides),
        gpus=gpus,
        cpus=default_cpus if cpus is None else cpus,
        output=output,
        after=tuple(after),
        reads_test=bool(spec.get("reads_test", False)),
        sees_reserved=bool(spec.get("sees_reserved", False)),
        deps=(),
    )
    refs = [m for o in overrides for m in PLACEHOLDER.findall(o) if m not in OWN]
    return stage, refs + list(after)


def parse(stages: Mapping, cpus_per_stage: float, common: Sequence[str] = ()) -> list[Stage]:
    """The stages of `chain.stages` in the order they run: as written, except that a stage comes after
    every stage it depends on. `common` (chain.overrides) is appended to every stage's overrides."""
    if not stages:
        raise ConfigError(["chain.stages is empty: task=chain needs stages (e.g. +experiment=chain_cpu)"])
    default_cpus = _number("chain.cpus_per_stage", cpus_per_stage)
    written, deps = {}, {}
    for name, spec in stages.items():
        if not re.fullmatch(r"[A-Za-z_][\w-]*", str(name)) or name in OWN:
            raise ConfigError([f"chain.stages.{name}: a stage name is a word and not {' or '.join(OWN)}"])
        written[name], refs = _stage(name, spec, default_cpus, list(common))
        for ref in refs:
            if ref not in stages:
                raise ConfigError(
                    [
                        f"chain.stages.{name}: {{{ref}}} names no stage (stages: {', '.join(stages)}; "
                        f"other placeholders: {', '.join(f'{{{o}}}' for o in OWN)})"
                    ]
                )
        deps[name] = list(dict.fromkeys(r for r in refs if r != name))
        if name in refs:
            raise ConfigError([f"chain.stages.{name}: a stage cannot reference itself"])
    order = _order(list(written), deps)
    at = {name: i for i, name in enumerate(order)}
    return [
        Stage(**{**written[n].__dict__, "deps": tuple(sorted(deps[n], key=at.__getitem__))}) for n in order
    ]


def _order(names: list[str], deps: dict[str, list[str]]) -> list[str]:
    """Kahn's topological order, taking the earliest-written ready stage first; a cycle is a ConfigError."""
    index = {n: i for i, n in enumerate(names)}
    waiting = {n: set(deps[n]) for n in names}
    ready = [index[n] for n in names if not waiting[n]]
    heapq.heapify(ready)
    order = []
    while ready:
        name = names[heapq.heappop(ready)]
        order.append(name)
        for other, needs in waiting.items():
            if name in needs:
                needs.discard(name)
                if not needs:
                    heapq.heappush(ready, index[other])
    if len(order) < len(names):
        raise ConfigError([f"chain.stages: a cycle: {' -> '.join(_cycle(waiting, set(order)))}"])
    return order


def _cycle(waiting: dict[str, set[str]], done: set[str]) -> list[str]:
    path = [next(n for n in waiting if n not in done)]
    while path.count(path[-1]) < 2:
        path.append(sorted(waiting[path[-1]])[0])
    return path[path.index(path[-1]) :]


def output_paths(stages: list[Stage], chain_dir: Path, given: Mapping[str, Path]) -> dict[str, Path]:
    """What each stage's placeholder stands for: a given path, else its run dir (or `output` inside it)."""
    return {
        s.name: given.get(s.name) or (s.run_dir(chain_dir) / s.output if s.output else s.run_dir(chain_dir))
        for s in stages
    }


def fill(stage: Stage, outputs: Mapping[str, Path], chain_dir: Path) -> list[str]:
    """The stage's overrides with every placeholder replaced by its absolute path."""
    values = {**{k: str(v) for k, v in outputs.items()}, "here": str(stage.run_dir(chain_dir))}
    values["chain"] = str(chain_dir)
    filled = [PLACEHOLDER.sub(lambda m: values[m.group(1)], o) for o in stage.overrides]
    # an unset value interpolated into an override ("data.path=${data.path}") reads None, which Hydra would
    # take for the string "None": it means null
    return [re.sub(r"^([^=]+)=None$", r"\1=null", o) for o in filled]


def given_paths(given: Mapping, stages: list[Stage]) -> dict[str, Path]:
    names = [s.name for s in stages]
    found = {}
    for name, path in (given or {}).items():
        if name not in names:
            raise ConfigError([f"chain.given.{name}: no such stage (stages: {', '.join(names)})"])
        found[name] = Path(str(path)).expanduser().absolute()
        if not found[name].exists():
            raise ConfigError([f"chain.given.{name} = {str(path)!r}: does not exist"])
    return found


@dataclass(frozen=True)
class Scope:
    """Which stages this run covers. `run`: the stages it may run (it still skips unchanged ones);
    `before`: those before chain.from, whose earlier results stand; `out`: stage -> why it is left out."""

    run: tuple[str, ...]
    before: tuple[str, ...]
    out: dict[str, str]


def scope(stages: list[Stage], first: str | None, last: str | None, given: Mapping[str, Path]) -> Scope:
    names = [s.name for s in stages]
    for key, value in (("chain.from", first), ("chain.until", last)):
        if value is not None and value not in names:
            raise ConfigError([f"{key} = {value!r}: no such stage (stages: {', '.join(names)})"])
    lo = names.index(first) if first else 0
    hi = names.index(last) if last else len(names) - 1
    if lo > hi:
        raise ConfigError([f"chain.from = {first!r} comes after chain.until = {last!r} in the chain"])
    dependents = {n: [s.name for s in stages if n in s.deps] for n in names}
    givers: dict[str, set[str]] = {}  # a stage every user of which is given (or only feeds given ones)
    for name in reversed(names):
        users = dependents[name]
        if name not in given and users and all(u in given or u in givers for u in users):
            givers[name] = {g for u in users for g in ({u} if u in given else givers[u])}
    out = {n: f"needed only by given {', '.join(sorted(g))}" for n, g in givers.items()}
    out |= {n: f"after chain.until={last}" for n in names[hi + 1 :]}
    window = [n for n in names[lo : hi + 1] if n not in out]
    return Scope(
        run=tuple(n for n in window if n not in given),
        before=tuple(n for n in names[:lo] if n not in given and n not in out),
        out=out,
    )
