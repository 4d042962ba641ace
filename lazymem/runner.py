"""What `lazymem run` runs: compose conf/config.yaml, then run the task `task` names (the task registry,
lazymem/tasks) inside a run directory that holds the resolved config, meta.json and the task's outputs.

Kept apart from lazymem/run.py so that the task function and the resolver live in an importable module:
launchers such as Ray pickle them by reference, and `__main__` does not exist in their workers.
"""

from __future__ import annotations

import logging
import os
import random
import secrets
import signal
import sys
from functools import lru_cache
from pathlib import Path

import hydra
import numpy as np
from hydra.core.hydra_config import HydraConfig
from hydra.experimental.callback import Callback
from hydra.types import RunMode
from omegaconf import DictConfig, OmegaConf

from lazymem import interrupt, tasks, tracking
from lazymem.data.schema import DataError
from lazymem.eval.records import status_counts
from lazymem.llm.client import ProviderRefused
from lazymem.llm.managed_server import ServerDied, ServerStartError
from lazymem.rundir import (
    RunDirError,
    RunMeta,
    check_run_dir,
    outcome,
    over_budget,
    scrub,
    secret_values,
    write_config,
)
from lazymem.validate import ConfigError, validate

log = logging.getLogger("lazymem")


@lru_cache(maxsize=1)
def _uid() -> str:
    """Unique per process: run directories of jobs started in the same second never collide."""
    return f"{os.getpid():x}{secrets.token_hex(2)}"


if not OmegaConf.has_resolver("lazymem_uid"):
    OmegaConf.register_new_resolver("lazymem_uid", _uid)


class Run:
    """What a task gets besides its config: its directory, the meta record and the tracker (logger=none:
    one that does nothing), which lives as long as the task."""

    def __init__(self, cfg: DictConfig, run_dir: Path):
        self.cfg, self.dir = cfg, run_dir
        self.meta = RunMeta(run_dir, cfg.task)
        self.tracker: tracking.Tracker = tracking.Tracker()


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
# a clear stop with one message (no traceback): bad input, bad config, a model server that will not serve
CLEAR_STOPS = (DataError, ConfigError, ServerStartError, ServerDied, ProviderRefused)


def _task(name: str) -> tasks.Task:
    task = tasks.find(str(name))
    if task is None:
        raise ConfigError([f"unknown task '{name}' (`lazymem ls` lists the tasks)"])
    return task


def _resumes_itself(cfg: DictConfig) -> bool:
    """Whether a resumed run's task decides itself what a changed config reruns. Asked of resumed runs only,
    since it imports the task's module; an unknown task does not (it fails in `execute`, with its
    meta.json)."""
    task = tasks.find(str(cfg.get("task"))) if cfg.get("resume") else None
    return task is not None and task.resumes_itself


def _budget(questions: dict | None, cfg: DictConfig) -> dict | None:
    if questions is not None:
        questions["max_error_rate"] = float(cfg.get("max_error_rate", 0.0))
    return questions


def seed_everything(seed: int) -> None:
    """Seeds the process-wide python and numpy RNGs. Components with their own generator get `seed` through
    their config; torch is not seeded here: in this process it only runs inference (encoders,
    rerankers), and training runs in VERL/LLaMA-Factory processes whose seeds come from conf/train."""
    random.seed(seed)
    np.random.seed(seed)


def execute(cfg: DictConfig) -> dict | None:
    for name in QUIET:  # per-request chatter of libraries; their warnings still show
        logging.getLogger(name).setLevel(logging.WARNING)
    run_dir = Path(HydraConfig.get().runtime.output_dir)
    # an earlier run here is refused (or resumed) before anything is written
    check_run_dir(run_dir, cfg, _resumes_itself(cfg))
    run_dir.mkdir(parents=True, exist_ok=True)
    write_config(cfg, run_dir)
    run = Run(cfg, run_dir)
    log.info("run directory: %s", run_dir)
    # logger=wandb: a W&B run (offline by default) for the task's duration, else one that does nothing
    tracker = run.tracker = tracking.start(cfg, run_dir)
    seed_everything(int(cfg.seed))
    status, error, result, questions = "failed", None, None, None
    try:
        with interrupt.handling():
            validate(cfg)  # before any server starts or model loads
            task = _task(cfg.task)
            result = task.run(cfg, run)
        status, questions = outcome(status_counts(run_dir) if task.counts_questions else None)
        if status != "ok":
            error = (
                f"{questions['errors']} of {questions['ok'] + questions['errors']} questions failed "
                f"(see records.jsonl; resume=true retries them)"
            )
        return result
    except KeyboardInterrupt as e:  # Interrupted (SIGINT/SIGTERM), or Ctrl-C before the handler was set
        stop = e if isinstance(e, interrupt.Interrupted) else interrupt.Interrupted(signal.SIGINT)
        status, error = "interrupted", f"interrupted by {stop.name}"
        print(
            f"error: {error}; servers stopped, finished questions kept. Continue with resume=true "
            f"hydra.run.dir={run_dir}",
            file=sys.stderr,
        )
        raise SystemExit(stop.exit_code) from None
    except CLEAR_STOPS as e:
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
    except BaseException as e:
        error = f"{type(e).__name__}: {e}"
        raise
    finally:
        run.meta.finish(status, error, _budget(questions, cfg))
        secrets = secret_values(cfg)
        scrub(run_dir, secrets)  # before the tracker reads the outputs
        tracker.finish(run_dir, result, ok=status == "ok")
        if tracker.files:  # and W&B's own text files once it has written them
            scrub(tracker.files, secrets)
        if status != "ok" and questions is not None:
            _report_errors(run, error)


def _report_errors(run: Run, error: str) -> None:
    """A run with failed questions: a warning within the error budget, else a failed exit."""
    questions = run.meta.data["questions"]
    message = (
        f"{error}; error rate {questions['error_rate']:.1%} > max_error_rate {questions['max_error_rate']:g}"
    )
    if over_budget(run.meta.data):
        _fail(message)
    else:
        log.warning("%s (within max_error_rate %g)", error, questions["max_error_rate"])


class RunDirGuard(Callback):
    """Checks the run directory before Hydra writes its .hydra/ files there (single runs; sweep jobs are
    checked by execute)."""

    def on_run_start(self, config: DictConfig, **kwargs) -> None:
        task_cfg = OmegaConf.masked_copy(config, [k for k in config if k != "hydra"])
        check_run_dir(Path(str(config.hydra.run.dir)), task_cfg, _resumes_itself(task_cfg))

    def on_multirun_start(self, config: DictConfig, **kwargs) -> None:
        sweep_dir = Path(str(config.hydra.sweep.dir))
        if not config.get("resume") and any(sweep_dir.glob("*/meta.json")):
            raise RunDirError(
                f"error: {sweep_dir} already holds a sweep; continue it with resume=true, or pick a new "
                "directory with hydra.sweep.dir=DIR"
            )


@hydra.main(config_path="pkg://lazymem.conf", config_name="config", version_base="1.3")
def main(cfg: DictConfig) -> dict | None:
    return execute(cfg)
