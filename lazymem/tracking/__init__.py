"""Run tracking (conf/logger/): one Weights & Biases run per lazymem run, live for the task's duration.

The runner opens the tracker around the task (`start`) and closes it in a finally (`Tracker.finish`);
tasks reach it as `run.tracker`. While the task runs, `run.tracker.on_record(benchmark)` is the callback
that logs each evaluated question as one history row at the next step (tracking/live.py); trainers log
their steps through their own W&B integration into the same project and group (settings.subprocess_env,
settings.trainer_reports). At the end the tracker logs what the run directory holds (tracking/outputs.py):
summary keys, records and paper tables as W&B tables, plots, and the records, results and a trained
checkpoint (by reference) as Artifacts whose metadata names the datasets (path, sha256 from meta.json).

The run's name is the run directory's name (a sweep job's: `<sweep dir>/<job>`), its config the redacted
resolved config that config.yaml holds, its job_type the task, its group the sweep's (else the run's own
name). Mode: WANDB_MODE in the environment wins over logger.mode (default offline: the run lands in
<run dir>/wandb/offline-run-*, `wandb sync` it later). Secrets never reach W&B (tracking/redaction.py),
and console capture is off (lazymem.log is in the run directory). The tracker never fails a run: a W&B
that cannot start or log is a warning, and the run goes on. `logger=none` does nothing and never imports
wandb.
"""

from __future__ import annotations

import json
import logging
import re
import sys
from collections.abc import Callable
from pathlib import Path

from omegaconf import DictConfig, OmegaConf

from lazymem.eval.records import read_records
from lazymem.rundir import secret_values
from lazymem.tracking import outputs
from lazymem.tracking.live import Live
from lazymem.tracking.redaction import redacted_argv, scrub_values, shown_argv, wandb_config
from lazymem.tracking.settings import (
    enabled,
    group,
    options,
    resolve_mode,
    run_id,
    run_name,
    subprocess_env,
    trainer_reports,
    wandb_dir,
)

__all__ = ["Tracker", "WandbTracker", "options", "run_name", "start", "subprocess_env", "trainer_reports"]
log = logging.getLogger("lazymem")


class Tracker:
    """No tracking (logger=none, or a W&B that could not start)."""

    active = False
    files: Path | None = None  # the folder W&B wrote this run's files into

    def on_record(self, benchmark: str) -> Callable[[dict], None] | None:
        """The per-question callback of one benchmark's evaluation (None: nothing to call)."""
        return None

    def finish(self, run_dir: Path, result=None, ok: bool = True) -> None:
        pass


class WandbTracker(Tracker):
    active = True

    def __init__(self, wandb, run, opts: dict, secrets: list[str]):
        self.wandb, self.run, self.opts, self.secrets = wandb, run, opts, secrets
        self.live, self.live_failed = Live(), False
        try:
            self.files = Path(run.settings.sync_dir)
        except Exception:
            self.files = None

    def on_record(self, benchmark: str) -> Callable[[dict], None]:
        return lambda record: self.log_question(record, benchmark)

    def log_question(self, record: dict, benchmark: str) -> None:
        try:
            row = self.live.row(record, benchmark)
            self.run.log(row, step=self.live.step)
        except Exception as e:  # one warning; the evaluation goes on
            if not self.live_failed:
                log.warning("tracking: logging a question to wandb failed: %s: %s", type(e).__name__, e)
            self.live_failed = True

    def log_outputs(self, run_dir: Path, result=None) -> None:
        wandb, max_rows = self.wandb, self.opts.get("max_records")
        summary = scrub_values(outputs.outputs_summary(run_dir, result), self.secrets)
        summary["run_dir"] = str(run_dir)
        self.run.summary.update(summary)
        media: dict = {}
        if self.opts.get("log_records", True):
            for key, path in outputs.records_files(run_dir).items():
                records = read_records(path)
                rows = scrub_values(outputs.record_rows(records, max_rows), self.secrets)
                if len(rows) < len(records):
                    log.info("tracking: %s: the first %d of %d records logged", key, len(rows), len(records))
                media[key] = wandb.Table(
                    columns=list(outputs.RECORD_COLUMNS), data=rows, allow_mixed_types=True
                )
        for path in sorted(run_dir.glob("*.csv"))[: outputs.MAX_CSV_TABLES]:
            header, rows = outputs.csv_rows(path, max_rows)
            if header:
                rows = scrub_values(rows, self.secrets)
                media[f"tables/{path.stem}"] = wandb.Table(columns=header, data=rows, allow_mixed_types=True)
        for key, path in outputs.images(run_dir).items():
            media[key] = wandb.Image(str(path))
        if media:
            self.run.log(media, step=self.live.step + 1)  # after the last live row

    def log_artifacts(self, run_dir: Path, result=None) -> None:
        """The run's outputs as Artifacts, named after the run, with the datasets they came from."""
        meta_path = run_dir / "meta.json"
        meta = json.loads(meta_path.read_text()) if meta_path.is_file() else {}
        metadata = {"run_dir": str(run_dir), "task": meta.get("task"), "datasets": meta.get("datasets", [])}
        slug = re.sub(r"[^A-Za-z0-9_.-]", "-", run_name(run_dir))
        for spec in outputs.artifacts(run_dir, result):
            artifact = self.wandb.Artifact(f"{slug}-{spec.kind}", type=spec.kind, metadata=metadata)
            for name, path in spec.files.items():
                artifact.add_file(str(path), name=name)
            for path in spec.references:  # the path only: no checksum pass over gigabytes
                artifact.add_reference(path.as_uri(), checksum=False)
            self.run.log_artifact(artifact)

    def finish(self, run_dir: Path, result=None, ok: bool = True) -> None:
        run_dir = Path(run_dir)
        for step in (self.log_outputs, self.log_artifacts):
            try:
                step(run_dir, result)
            except Exception as e:
                log.warning("tracking: %s to wandb failed: %s: %s", step.__name__, type(e).__name__, e)
        try:
            self.run.finish(exit_code=0 if ok else 1)
        except Exception as e:
            log.warning("tracking: wandb finish failed: %s: %s", type(e).__name__, e)
        try:  # stop W&B's service process now, not at interpreter exit (a Ray worker kills it before)
            if getattr(self.wandb, "run", None) is None:
                self.wandb.teardown()
        except Exception as e:
            log.warning("tracking: wandb teardown failed: %s: %s", type(e).__name__, e)


def start(cfg: DictConfig, run_dir: Path) -> Tracker:
    """The run's tracker; a W&B that cannot start is one warning and no tracking."""
    run_dir = Path(run_dir)
    try:
        opts = options(cfg)
    except Exception as e:
        log.warning("tracking off: the logger config does not resolve: %s", e)
        return Tracker()
    if not enabled(opts):
        return Tracker()
    mode = resolve_mode(opts)
    if mode == "disabled":
        return Tracker()
    try:
        import wandb

        if mode not in ("offline", "dryrun") and not wandb.login(prompt=False, verify=False):
            log.warning(
                "tracking off: wandb mode '%s' needs credentials (`wandb login` or WANDB_API_KEY); "
                "logger.mode=offline (the default) or WANDB_MODE=offline tracks without them",
                mode,
            )
            return Tracker()
        secrets = secret_values(cfg)
        with shown_argv(redacted_argv(sys.argv, secrets)):
            run = wandb.init(
                project=opts.get("project") or "lazymem",
                entity=opts.get("entity") or None,
                mode=mode,
                group=group(opts, run_dir),
                job_type=str(OmegaConf.select(cfg, "task") or "run"),
                name=run_name(run_dir),
                id=run_id(run_dir),  # kept in the run directory: a resumed run continues its W&B run
                resume="allow",
                tags=[str(t) for t in opts.get("tags") or []],
                dir=str(wandb_dir(opts, run_dir)),
                config=wandb_config(cfg),
                settings=wandb.Settings(console="off", quiet=True),  # no summary dump after the results
            )
    except Exception as e:
        log.warning(
            "tracking off: wandb did not start (%s: %s); the run goes on untracked", type(e).__name__, e
        )
        return Tracker()
    return WandbTracker(wandb, run, opts, secrets)
