"""What `python -m lazymem.run` runs: compose conf/config.yaml, run `lazymem.tasks.<task>.run(cfg, run)`
inside a run directory that holds the resolved config, meta.json and the task's outputs.

Kept apart from lazymem/run.py so that the task function and the resolver live in an importable module:
launchers such as Ray pickle them by reference, and `__main__` does not exist in their workers.
"""

from __future__ import annotations

import importlib
import logging
import os
import secrets
from functools import lru_cache
from pathlib import Path

import hydra
from hydra.core.hydra_config import HydraConfig
from hydra.types import RunMode
from omegaconf import DictConfig, OmegaConf

from lazymem import tracking
from lazymem.data.schema import DataError
from lazymem.rundir import RunMeta, scrub, secret_values, write_config

log = logging.getLogger("lazymem")
CONF = Path(__file__).resolve().parent.parent / "conf"  # an absolute path: this is not __main__


@lru_cache(maxsize=1)
def _uid() -> str:
    """Unique per process: run directories of jobs started in the same second never collide."""
    return f"{os.getpid():x}{secrets.token_hex(2)}"


if not OmegaConf.has_resolver("lazymem_uid"):
    OmegaConf.register_new_resolver("lazymem_uid", _uid)


class Run:
    """What a task gets besides its config: its directory and the meta record."""

    def __init__(self, cfg: DictConfig, run_dir: Path):
        self.cfg, self.dir = cfg, run_dir
        self.meta = RunMeta(run_dir, cfg.task)


def _in_sweep() -> bool:
    return HydraConfig.get().mode == RunMode.MULTIRUN


def _fail(message: str) -> None:
    """Stop with one clear message: a single run exits non-zero; in a sweep only this job fails (its
    meta.json says so and sweep_summary.json lists it) and the other jobs go on."""
    if _in_sweep():
        log.error("job failed: %s", message)
        return
    raise SystemExit(message if message.startswith("error:") else f"error: {message}") from None


QUIET = ("httpx", "httpx2", "httpcore", "openai", "bm25s", "sentence_transformers", "urllib3", "filelock")


def execute(cfg: DictConfig) -> dict | None:
    for name in QUIET:  # per-request chatter of libraries; their warnings still show
        logging.getLogger(name).setLevel(logging.WARNING)
    run_dir = Path(HydraConfig.get().runtime.output_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    write_config(cfg, run_dir)
    run = Run(cfg, run_dir)
    log.info("run directory: %s", run_dir)
    tracker = tracking.start(cfg, run_dir)  # logger=wandb: a W&B run (offline by default), else nothing
    status, error, result = "failed", None, None
    try:
        task = importlib.import_module(f"lazymem.tasks.{cfg.task}")
        result = task.run(cfg, run)
        status = "ok"
        return result
    except ModuleNotFoundError as e:
        if e.name != f"lazymem.tasks.{cfg.task}":
            raise
        error = f"unknown task '{cfg.task}' (no module lazymem.tasks.{cfg.task})"
        _fail(error)
    except DataError as e:
        error = str(e)
        _fail(error)
    except SystemExit as e:  # a task's own clear stop (preflight, missing inputs)
        error = str(e.code)
        _fail(error)
    except Exception as e:
        error = f"{type(e).__name__}: {e}"
        if not _in_sweep():
            raise
        log.exception("job failed")
    except BaseException as e:  # KeyboardInterrupt and the like end the whole run
        error = f"{type(e).__name__}: {e}"
        raise
    finally:
        run.meta.finish(status, error)
        secrets = secret_values(cfg)
        scrub(run_dir, secrets)  # before the tracker reads the outputs
        tracker.finish(run_dir, result, ok=status == "ok")
        if tracker.files:  # and W&B's own text files once it has written them
            scrub(tracker.files, secrets)


@hydra.main(config_path=str(CONF), config_name="config", version_base="1.3")
def main(cfg: DictConfig) -> dict | None:
    return execute(cfg)
