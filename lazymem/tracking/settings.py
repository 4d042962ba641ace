"""The `logger` config group (conf/logger/) and what follows from it: mode, names, the trainers' W&B."""

from __future__ import annotations

import hashlib
import os
import secrets
from pathlib import Path

from omegaconf import DictConfig, OmegaConf


def options(cfg: DictConfig) -> dict:
    """The `logger` group as a plain dict; a config without one tracks nothing."""
    node = OmegaConf.select(cfg, "logger")
    if node is None:
        return {"backend": "none"}
    return OmegaConf.to_container(node, resolve=True) if OmegaConf.is_config(node) else dict(node)


def enabled(opts: dict) -> bool:
    return opts.get("backend") == "wandb"


def resolve_mode(opts: dict, environ=None) -> str:
    """WANDB_MODE in the environment, when set, wins over logger.mode; the default is offline."""
    environ = os.environ if environ is None else environ
    return environ.get("WANDB_MODE") or opts.get("mode") or "offline"


def sweep_group(run_dir: Path) -> str | None:
    """The sweep directory's name for a job of a multirun (None for a single run or outside Hydra)."""
    try:
        from hydra.core.hydra_config import HydraConfig
        from hydra.types import RunMode

        if not HydraConfig.initialized():
            return None
        hc = HydraConfig.get()
        if hc.mode != RunMode.MULTIRUN:
            return None
        try:  # where the job landed: <sweep dir>/<subdir>
            depth = len(Path(str(hc.sweep.subdir)).parts)
            return Path(run_dir).resolve().parents[depth - 1].name
        except Exception:
            return Path(str(hc.sweep.dir)).name
    except Exception:
        return None


def run_name(run_dir: Path) -> str:
    """The run directory's name; a sweep job's (its number) after the sweep's: `<sweep dir>/<job>`."""
    sweep = sweep_group(run_dir)
    return f"{sweep}/{Path(run_dir).name}" if sweep else Path(run_dir).name


RUN_ID_FILE = ".wandb_run_id"


def run_id(run_dir: Path, trainer: str = "") -> str:
    """The W&B run id of this run directory (or of a trainer it launches): drawn once and kept in the
    directory, so a resumed run (resume=true, a chain's continued stage) goes on in the same W&B run
    (verl #2783), while a new run in a reused path (a chain stage rerun after its old directory was moved
    aside) starts a new one."""
    path = Path(run_dir) / RUN_ID_FILE
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(secrets.token_hex(8) + "\n", encoding="utf-8")
    base = path.read_text(encoding="utf-8").strip()
    return base if not trainer else f"{base}-{hashlib.sha256(trainer.encode()).hexdigest()[:6]}"


def group(opts: dict, run_dir: Path) -> str:
    """logger.group, else the sweep's name, else the run's own: a run and the trainers it launches
    (LLaMA-Factory, VERL: W&B runs of their own) are always shown together."""
    return opts.get("group") or sweep_group(run_dir) or run_name(run_dir)


def wandb_dir(opts: dict, run_dir: Path) -> Path:
    """The folder W&B writes its `wandb/` folder into: logger.dir, or the run directory."""
    return Path(opts["dir"]) if opts.get("dir") else Path(run_dir)


def trainer_reports(cfg: DictConfig) -> bool:
    """Whether a trainer launched by this run logs its training steps to W&B (logger=wandb)."""
    return enabled(options(cfg)) and resolve_mode(options(cfg)) != "disabled"


def subprocess_env(cfg: DictConfig, run_dir: Path, name: str, environ=None) -> dict[str, str]:
    """The environment for a trainer subprocess (LLaMA-Factory, VERL) that reports to the same W&B project.

    os.environ (or `environ`) plus WANDB_PROJECT, WANDB_ENTITY (if set), WANDB_MODE (logger.mode unless the
    environment has one), WANDB_DIR, WANDB_RUN_GROUP (the run's group), WANDB_NAME=name, WANDB_TAGS, and
    WANDB_RUN_ID (kept in the run directory: a resumed run's trainer continues its W&B run) with
    WANDB_RESUME=allow.
    With logger=none: WANDB_MODE=disabled. (VERL passes its project and run name to wandb.init itself:
    trainer.project_name / trainer.experiment_name; the other variables it takes from here.)
    """
    env = dict(os.environ if environ is None else environ)
    opts = options(cfg)
    if not enabled(opts):
        env["WANDB_MODE"] = "disabled"
        return env
    env["WANDB_PROJECT"] = str(opts.get("project") or "lazymem")
    if opts.get("entity"):
        env["WANDB_ENTITY"] = str(opts["entity"])
    env["WANDB_MODE"] = resolve_mode(opts, env)
    env["WANDB_DIR"] = str(wandb_dir(opts, run_dir).resolve())
    env["WANDB_RUN_GROUP"] = group(opts, run_dir)
    env["WANDB_NAME"] = name
    env["WANDB_RUN_ID"], env["WANDB_RESUME"] = run_id(run_dir, name), "allow"
    if opts.get("tags"):
        env["WANDB_TAGS"] = ",".join(str(t) for t in opts["tags"])
    return env
