"""Sweeps (`-m`): one summary of every job, written when the sweep ends, failed jobs included.

A job's failure is recorded in its own meta.json (status, error) and does not stop the other jobs; this
Hydra callback collects them into sweep_summary.json in the sweep directory and names the failures: every
job whose status is not `ok`, except `partial` ones within their `max_error_rate`.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path

from hydra.experimental.callback import Callback
from omegaconf import DictConfig

from lazymem.rundir import over_budget

log = logging.getLogger("lazymem")


def summarize_sweep(sweep_dir: Path) -> dict:
    jobs = []
    for meta_path in sorted(sweep_dir.glob("*/meta.json"), key=lambda p: (len(p.parent.name), p.parent.name)):
        meta = json.loads(meta_path.read_text())
        overrides = meta_path.parent / ".hydra" / "overrides.yaml"
        jobs.append(
            {
                "job": meta_path.parent.name,
                "dir": str(meta_path.parent),
                "task": meta.get("task"),
                "status": meta.get("status"),
                "error": meta.get("error"),
                "questions": meta.get("questions"),
                "failed": over_budget(meta),
                "overrides": overrides.read_text().strip() if overrides.exists() else None,
            }
        )
    failed = [j for j in jobs if j["failed"]]
    return {
        "sweep_dir": str(sweep_dir),
        "jobs": jobs,
        "ok": len(jobs) - len(failed),
        "failed": [j["job"] for j in failed],
    }


class SweepSummary(Callback):
    def on_multirun_end(self, config: DictConfig, **kwargs) -> None:
        sweep_dir = Path(str(config.hydra.sweep.dir))
        if not sweep_dir.is_dir():
            return
        summary = summarize_sweep(sweep_dir)
        (sweep_dir / "sweep_summary.json").write_text(json.dumps(summary, indent=2) + "\n")
        log.info("sweep: %d ok, %d failed (%s)", summary["ok"], len(summary["failed"]), sweep_dir)
        for job in summary["jobs"]:
            if job["failed"]:
                log.error("job %s %s: %s", job["job"], job["status"], job["error"])
        if summary["failed"]:
            raise SystemExit(
                f"error: {len(summary['failed'])} of {len(summary['jobs'])} jobs failed, "
                f"see {sweep_dir / 'sweep_summary.json'}"
            )
