"""task=report: the paper's tables, plots and an HTML dashboard over finished run directories.

    python -m lazymem.run task=report 'report.inputs=[outputs/sweep_w,/tmp/q3]'

Each input is a run directory (task=evaluate or task=main_table) or a folder above run directories
(a Hydra sweep with numbered subdirectories). Writes into this run's directory: report.md and one CSV
per table, the PNG plots and dashboard.html (self-contained; open it from disk), and prints the tables.

Options (conf/config.yaml, `report:`): inputs (required), aliases, max_chars, training (GRPO checkpoint
directories: learning curves, lazymem/report/curves.py).
"""

from __future__ import annotations

from omegaconf import OmegaConf

from lazymem.eval.summary import SummaryError
from lazymem.report import ablation_tables, curves
from lazymem.report.collect import load_runs, rows
from lazymem.report.dashboard import write_dashboard
from lazymem.report.plots import make_plots
from lazymem.report.tables import build_tables, load_references, write_tables
from lazymem.tasks.contract import Task


def _option(cfg, key: str, default=None):
    value = OmegaConf.select(cfg, f"report.{key}", default=default)
    return OmegaConf.to_container(value, resolve=True) if OmegaConf.is_config(value) else value


def run(cfg, run) -> dict:
    inputs = _option(cfg, "inputs")
    if not inputs:
        raise SystemExit(
            "error: task=report needs its inputs: pass 'report.inputs=[RUN_DIR_OR_SWEEP_DIR,...]'"
        )
    if isinstance(inputs, str):
        inputs = [inputs]
    aliases = _option(cfg, "aliases", {}) or {}
    max_chars = int(_option(cfg, "max_chars", 20000))
    try:
        runs = load_runs(inputs)
    except (FileNotFoundError, SummaryError) as e:
        raise SystemExit(f"error: {e}") from None
    if not runs:
        raise SystemExit(f"error: no run directories (config.yaml + summary.json) under {inputs}")
    flat = rows(runs)
    ref = load_references()
    training = [str(d) for d in _option(cfg, "training", []) or []]
    extra = [curves.construction_table(runs), curves.learning_table(training)]
    tables = build_tables(flat, ref, aliases) + ablation_tables.build(runs, ref) + [t for t in extra if t]
    md = write_tables(tables, run.dir)
    plots = make_plots(flat, ref, run.dir, aliases)
    plots += [p for p in (curves.learning_plot(training, run.dir),) if p]
    dashboard = write_dashboard(run.dir, tables, plots, runs, max_chars)
    print("\n" + md)
    print(f"dashboard: {dashboard}")
    return {
        "runs": [str(r.path) for r in runs],
        "tables": [t.key for t in tables],
        "plots": [p.name for p in plots],
    }


TASK = Task(run)
