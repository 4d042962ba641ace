"""The one entry point: `python -m lazymem.run [task=NAME] [+experiment=NAME] [overrides]`.

Composes conf/config.yaml with Hydra and runs `lazymem.tasks.<task>.run(cfg, run)` inside a run
directory that holds the resolved config, meta.json and the task's outputs.
"""

from __future__ import annotations

import importlib
import logging
import os
import secrets
import sys
from functools import lru_cache
from pathlib import Path

import hydra
from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig, OmegaConf

from lazymem.data.schema import DataError
from lazymem.rundir import RunMeta, scrub, secret_values, write_config

log = logging.getLogger("lazymem")


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


QUIET = ("httpx", "httpx2", "httpcore", "openai", "bm25s", "sentence_transformers", "urllib3", "filelock")


def execute(cfg: DictConfig) -> dict | None:
    for name in QUIET:  # per-request chatter of libraries; their warnings still show
        logging.getLogger(name).setLevel(logging.WARNING)
    run_dir = Path(HydraConfig.get().runtime.output_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    write_config(cfg, run_dir)
    run = Run(cfg, run_dir)
    log.info("run directory: %s", run_dir)
    status, error = "failed", None
    try:
        task = importlib.import_module(f"lazymem.tasks.{cfg.task}")
        result = task.run(cfg, run)
        status = "ok"
        return result
    except ModuleNotFoundError as e:
        if e.name != f"lazymem.tasks.{cfg.task}":
            raise
        error = f"unknown task '{cfg.task}' (no module lazymem.tasks.{cfg.task})"
        raise SystemExit(f"error: {error}") from None
    except DataError as e:
        error = str(e)
        raise SystemExit(f"error: {e}") from None
    except BaseException as e:
        error = f"{type(e).__name__}: {e}"
        raise
    finally:
        run.meta.finish(status, error)
        scrub(run_dir, secret_values(cfg))


@hydra.main(config_path="../conf", config_name="config", version_base="1.3")
def main(cfg: DictConfig) -> dict | None:
    return execute(cfg)


if __name__ == "__main__":
    sys.exit(main() and 0)
