"""A stage's fingerprint: what determines its outputs, hashed, so that a resumed chain reruns exactly the
stages whose fingerprint changed.

`{config, engine, inputs, digest}`: the sha256 of the stage's resolved config (composed in this process, as
its own run will compose it; without the `hydra` node and the keys that cannot change results, the same
lazymem.rundir.FREE_KEYS a run's own resume ignores), the versions of the engine that computes it, and
its inputs: each upstream stage's digest, or for a given path that path and its mtime. Model directories
are never hashed: a 4B checkpoint is 8 GB, and the digest of the stage that made it says the same.
"""

from __future__ import annotations

import fnmatch
import hashlib
import json
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from importlib import metadata
from pathlib import Path

from omegaconf import DictConfig

from lazymem.conf import CONF_DIR
from lazymem.rundir import FREE_KEYS, flatten, resolved_config
from lazymem.validate import ConfigError


def sha256_json(value) -> str:
    return hashlib.sha256(json.dumps(value, sort_keys=True, default=str).encode()).hexdigest()


@contextmanager
def composer() -> Iterator[Callable[[Sequence[str]], DictConfig]]:
    """compose(overrides) of the root config. Inside a running lazymem app (task=chain) its own Hydra
    composes; elsewhere (tests, tools) one is set up on the bundled config folder for the block."""
    from hydra import compose, initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    def run(overrides: Sequence[str]) -> DictConfig:
        return compose("config", overrides=list(overrides))

    if GlobalHydra.instance().is_initialized():
        yield run
        return
    with initialize_config_dir(str(CONF_DIR), version_base=None):
        yield run


def stage_config(compose: Callable[[Sequence[str]], DictConfig], name: str, overrides: Sequence[str]):
    """The stage's composed config and its resolved form (as its config.yaml will hold it); a bad
    override or an interpolation that does not resolve is a ConfigError naming the stage."""
    from hydra.errors import HydraException
    from omegaconf.errors import OmegaConfBaseException

    try:
        cfg = compose(overrides)
        return cfg, resolved_config(cfg)
    except (HydraException, OmegaConfBaseException) as e:
        reason = " ".join(line.strip() for line in str(e).splitlines() if line.strip())
        raise ConfigError([f"chain.stages.{name}: its config does not compose: {reason}"]) from None


def config_digest(resolved: Mapping) -> str:
    """sha256 of the config's keys that may change results (resume and logging, paths, timeouts: not)."""
    flat = flatten(dict(resolved))
    kept = {k: v for k, v in flat.items() if not any(fnmatch.fnmatchcase(k, p) for p in FREE_KEYS)}
    return sha256_json(kept)


def engine(cfg: DictConfig, versions: Callable[[DictConfig], Mapping[str, str]] | None) -> dict[str, str]:
    """{package: version} of what computes the stage: its task's `versions(cfg)` (an engine of its own, such
    as LLaMA-Factory for train_sft), or lazymem itself when its task names none."""
    return dict(versions(cfg)) if versions else {"lazymem": metadata.version("lazymem")}


def given_input(path: Path) -> dict:
    return {"path": str(path), "mtime": path.stat().st_mtime}


def fingerprint(config: str, engine: Mapping[str, str], inputs: Mapping[str, object]) -> dict:
    body = {"config": config, "engine": dict(engine), "inputs": dict(inputs)}
    return {**body, "digest": sha256_json(body)}


def changes(old: Mapping, new: Mapping) -> list[str]:
    """Which parts of a fingerprint differ: `config`, `engine (trl 1.15.0 -> 1.16.0)`, `input NAME`."""
    found = ["config"] if old.get("config") != new.get("config") else []
    a, b = old.get("engine") or {}, new.get("engine") or {}
    moved = [
        f"{k} {a.get(k, 'absent')} -> {b.get(k, 'absent')}" for k in sorted(a | b) if a.get(k) != b.get(k)
    ]
    if moved:
        found.append(f"engine ({', '.join(moved)})")
    a, b = old.get("inputs") or {}, new.get("inputs") or {}
    found += [f"input {k}" for k in sorted(a | b) if a.get(k) != b.get(k)]
    return found
