"""Run tracking (conf/logger/): one Weights & Biases run per lazymem run, logged from the run directory.

`start(cfg, run_dir)` opens the W&B run when a run begins: its name is the run directory's name (a sweep
job's: `<sweep dir>/<job>`), its config the redacted resolved config that config.yaml holds, its job_type
the task, and a sweep's jobs share a group (the sweep directory's name). `Tracker.finish` at the end logs
what the run directory holds, by file, so every task benefits without code of its own:

- summary.json (task=evaluate / main_table) -> summary keys `<method>/accuracy`,
  `<method>/by_type/<type>/accuracy`, `<method>/latency/<stage>/p95`, `<method>/memory_tokens/mean`, ...
  (main_table: `<benchmark>/<method>/...`); coverage.json -> `coverage/...` (radii/<w>/all_at_n, ...);
- records.jsonl (also one level down, main_table's benchmarks) -> a table `records` (`<bench>/records`)
  with RECORD_COLUMNS, long text clipped; *.csv (task=report's tables) -> tables `tables/<name>`;
- *.png anywhere in the run directory -> images `plots/<name>`;
- the task's returned dict: its top-level scalars -> summary keys.

Then the W&B run finishes with exit code 0, or 1 when the task failed. Mode: WANDB_MODE in the environment
wins over logger.mode (default offline: the run lands in <run dir>/wandb/offline-run-*, `wandb sync` it
later). Secrets never reach W&B: secret-looking config keys are redacted as in config.yaml, values of the
environment variables a config names as holding keys (`*key_env`) are replaced wherever they appear (config,
logged values, the command line W&B records), and console capture is off (lazymem.log is in the run
directory). The tracker never fails a run: a W&B that cannot start or log is one warning, and the run goes on.
`logger=none` does nothing and never imports wandb.

`subprocess_env(cfg, run_dir, name)` gives trainers launched as subprocesses (LLaMA-Factory `report_to:
wandb`, VERL `trainer.logger=[...,wandb]`) the same project, mode, directory and group.
"""

from __future__ import annotations

import csv
import json
import logging
import os
import sys
from contextlib import contextmanager
from pathlib import Path

from omegaconf import DictConfig, OmegaConf

from lazymem.rundir import REDACTED, SECRET_KEY, redact, secret_values

log = logging.getLogger("lazymem")

# the records table: one row per (method, question)
RECORD_COLUMNS = (
    "method",
    "qid",
    "type",
    "question",
    "reference",
    "answer",
    "correct",
    "memory_tokens",
    "latency_s",
    "status",
    "error",
)
MAX_CHARS = 1000  # longest text of one table cell or summary string
MAX_IMAGES = 50
MAX_CSV_TABLES = 30
SKIP_DIRS = ("wandb", "servers")  # never scanned for outputs (W&B's own files, model-server logs)


# --- configuration ----------------------------------------------------------------------------------


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


def group(opts: dict, run_dir: Path) -> str | None:
    return opts.get("group") or sweep_group(run_dir)


def run_name(run_dir: Path) -> str:
    """The run directory's name; a sweep job's (its number) after the sweep's: `<sweep dir>/<job>`."""
    sweep = sweep_group(run_dir)
    return f"{sweep}/{Path(run_dir).name}" if sweep else Path(run_dir).name


def wandb_dir(opts: dict, run_dir: Path) -> Path:
    """The folder W&B writes its `wandb/` folder into: logger.dir, or the run directory."""
    return Path(opts["dir"]) if opts.get("dir") else Path(run_dir)


def subprocess_env(cfg: DictConfig, run_dir: Path, name: str, environ=None) -> dict[str, str]:
    """The environment for a trainer subprocess (LLaMA-Factory, VERL) that reports to the same W&B project.

    os.environ (or `environ`) plus WANDB_PROJECT, WANDB_ENTITY (if set), WANDB_MODE (logger.mode unless the
    environment has one), WANDB_DIR, WANDB_RUN_GROUP (in a sweep, or logger.group), WANDB_NAME=name and
    WANDB_TAGS. With logger=none: WANDB_MODE=disabled. (VERL passes its project and run name to wandb.init
    itself: trainer.project_name / trainer.experiment_name; the other variables it takes from here.)
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
    grp = group(opts, run_dir)
    if grp:
        env["WANDB_RUN_GROUP"] = str(grp)
    env["WANDB_NAME"] = name
    if opts.get("tags"):
        env["WANDB_TAGS"] = ",".join(str(t) for t in opts["tags"])
    return env


# --- secrets ----------------------------------------------------------------------------------------


def scrub_values(node, secrets: list[str]):
    """A copy of a plain container with every secret value replaced inside its strings."""
    if not secrets:
        return node
    if isinstance(node, dict):
        return {k: scrub_values(v, secrets) for k, v in node.items()}
    if isinstance(node, list | tuple):
        return [scrub_values(v, secrets) for v in node]
    if isinstance(node, str):
        for s in secrets:
            node = node.replace(s, REDACTED)
    return node


def wandb_config(cfg: DictConfig) -> dict:
    """What config.yaml holds (secret-looking keys redacted), with the values of key variables removed."""
    return scrub_values(redact(OmegaConf.to_container(cfg, resolve=True)), secret_values(cfg))


def redacted_argv(argv: list[str], secrets: list[str]) -> list[str]:
    """The command line without secrets: `...api_key=VALUE` overrides blanked, key values replaced."""
    out = []
    for arg in argv:
        key, eq, value = arg.partition("=")
        if eq and value and SECRET_KEY.search(key.split(".")[-1]):
            arg = f"{key}={REDACTED}"
        out.append(scrub_values(arg, secrets))
    return out


@contextmanager
def _argv(argv: list[str]):
    """W&B records sys.argv when a run starts: show it the redacted one."""
    saved = sys.argv[:]
    sys.argv[:] = argv
    try:
        yield
    finally:
        sys.argv[:] = saved


# --- what a run directory holds -> W&B --------------------------------------------------------------


def clip(value, max_chars: int = MAX_CHARS):
    if value is None:
        return None
    text = value if isinstance(value, str) else str(value)
    return text if len(text) <= max_chars else text[: max_chars - 1] + "…"


def flatten(node, prefix: str = "") -> dict:
    """Nested dicts -> {"a/b/c": scalar}; lists and None are left out, long strings clipped."""
    out: dict = {}
    if isinstance(node, dict):
        for k, v in node.items():
            out.update(flatten(v, f"{prefix}/{k}" if prefix else str(k)))
    elif isinstance(node, bool | int | float) and prefix:
        out[prefix] = node
    elif isinstance(node, str) and prefix:
        out[prefix] = clip(node)
    return out


def flatten_method(summary: dict, prefix: str) -> dict:
    """One method's summary (lazymem/eval/metrics.py): X_by_type -> by_type/<type>/X (accuracy, f1),
    latency_s -> latency/<stage>/<stat>, the rest as nested keys; free-text error messages left out."""
    out: dict = {}
    for k, v in summary.items():
        if k == "error_messages":
            continue
        if k.endswith("_by_type") and isinstance(v, dict):  # accuracy_by_type, f1_by_type, ...
            metric = k.removesuffix("_by_type")
            out.update({f"{prefix}/by_type/{t}/{metric}": a for t, a in v.items() if a is not None})
        elif k == "latency_s":
            out.update(flatten(v, f"{prefix}/latency"))
        else:
            out.update(flatten(v, f"{prefix}/{k}"))
    return out


def flatten_summary(summary: dict) -> dict:
    """summary.json -> flat summary keys: evaluate's {dataset, methods: {m: ...}, llm, ...} gives
    `<method>/...`, main_table's {benchmark: that} gives `<benchmark>/<method>/...`."""
    out: dict = {}
    if isinstance(summary.get("methods"), dict):
        for name, s in summary["methods"].items():
            if isinstance(s, dict):
                out.update(flatten_method(s, str(name)))
        for k, v in summary.items():
            if k != "methods":
                out.update(flatten(v, str(k)))
        return out
    for k, v in summary.items():
        if isinstance(v, dict) and isinstance(v.get("methods"), dict):
            out.update({f"{k}/{key}": value for key, value in flatten_summary(v).items()})
        else:
            out.update(flatten(v, str(k)))
    return out


def result_summary(result) -> dict:
    """The task's returned dict: its top-level scalars (nested parts are in the files it wrote)."""
    if not isinstance(result, dict):
        return {}
    return {
        str(k): v for k, v in flatten({k: v for k, v in result.items() if not isinstance(v, dict)}).items()
    }


def record_row(record: dict) -> list:
    """One records.jsonl line -> a row of RECORD_COLUMNS (latency: the total seconds)."""
    latency = record.get("latency_s")
    if isinstance(latency, dict):
        latency = latency.get("total")
    return [
        record.get("method"),
        record.get("qid"),
        record.get("type"),
        clip(record.get("question")),
        clip(record.get("reference")),
        clip(record.get("answer")),
        record.get("correct"),
        record.get("memory_tokens"),
        latency,
        record.get("status"),
        clip(record.get("error")),
    ]


def record_rows(records: list[dict], max_records: int | None) -> list[list]:
    if max_records is not None:
        records = records[: int(max_records)]
    return [record_row(r) for r in records]


def _skipped(path: Path, run_dir: Path) -> bool:
    parts = path.relative_to(run_dir).parts[:-1]
    return any(p in SKIP_DIRS or p.startswith(".") for p in parts)


def records_files(run_dir: Path) -> dict[str, Path]:
    """records.jsonl of the run and of its benchmark subdirectories (task=main_table): key -> path."""
    found = {}
    if (run_dir / "records.jsonl").is_file():
        found["records"] = run_dir / "records.jsonl"
    for path in sorted(run_dir.glob("*/records.jsonl")):
        if not _skipped(path, run_dir):
            found[f"{path.parent.name}/records"] = path
    return found


def images(run_dir: Path) -> dict[str, Path]:
    """*.png under the run directory (W&B's own folder left out): `plots/<relative path>` -> path."""
    found = {}
    for path in sorted(run_dir.rglob("*.png")):
        if len(found) >= MAX_IMAGES:
            break
        if not _skipped(path, run_dir):
            found["plots/" + path.relative_to(run_dir).with_suffix("").as_posix()] = path
    return found


def outputs_summary(run_dir: Path, result=None) -> dict:
    """Every summary key the run directory and the returned dict give."""
    out = result_summary(result)
    for name, flat in (("summary.json", flatten_summary), ("coverage.json", None)):
        path = run_dir / name
        if not path.is_file():
            continue
        try:
            data = json.loads(path.read_text())
        except (OSError, json.JSONDecodeError) as e:
            log.warning("tracking: %s unreadable: %s", path, e)
            continue
        if isinstance(data, dict):
            out.update(flat(data) if flat else flatten(data, name.removesuffix(".json")))
    return out


def _cell(text: str):
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    return clip(text)


def csv_rows(path: Path, max_rows: int | None) -> tuple[list[str], list[list]]:
    with open(path, newline="") as f:
        rows = list(csv.reader(f))
    if not rows:
        return [], []
    header, body = rows[0], rows[1:]
    if max_rows is not None:
        body = body[: int(max_rows)]
    return header, [[_cell(c) for c in r] + [None] * (len(header) - len(r)) for r in body]


# --- the trackers -----------------------------------------------------------------------------------


class Tracker:
    """No tracking (logger=none, or a W&B that could not start)."""

    active = False
    files: Path | None = None  # the folder W&B wrote this run's files into

    def finish(self, run_dir: Path, result=None, ok: bool = True) -> None:
        pass


class WandbTracker(Tracker):
    active = True

    def __init__(self, wandb, run, opts: dict, secrets: list[str]):
        self.wandb, self.run, self.opts, self.secrets = wandb, run, opts, secrets
        try:
            self.files = Path(run.settings.sync_dir)
        except Exception:
            self.files = None

    def log_outputs(self, run_dir: Path, result=None) -> None:
        wandb, max_rows = self.wandb, self.opts.get("max_records")
        summary = scrub_values(outputs_summary(run_dir, result), self.secrets)
        summary["run_dir"] = str(run_dir)
        self.run.summary.update(summary)
        media: dict = {}
        if self.opts.get("log_records", True):
            from lazymem.eval.records import read_records

            for key, path in records_files(run_dir).items():
                records = read_records(path)
                rows = scrub_values(record_rows(records, max_rows), self.secrets)
                if len(rows) < len(records):
                    log.info("tracking: %s: the first %d of %d records logged", key, len(rows), len(records))
                media[key] = wandb.Table(columns=list(RECORD_COLUMNS), data=rows, allow_mixed_types=True)
        for path in sorted(run_dir.glob("*.csv"))[:MAX_CSV_TABLES]:
            header, rows = csv_rows(path, max_rows)
            if header:
                rows = scrub_values(rows, self.secrets)
                media[f"tables/{path.stem}"] = wandb.Table(columns=header, data=rows, allow_mixed_types=True)
        for key, path in images(run_dir).items():
            media[key] = wandb.Image(str(path))
        if media:
            self.run.log(media)

    def finish(self, run_dir: Path, result=None, ok: bool = True) -> None:
        try:
            self.log_outputs(Path(run_dir), result)
        except Exception as e:
            log.warning("tracking: logging the run's outputs to wandb failed: %s: %s", type(e).__name__, e)
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
        with _argv(redacted_argv(sys.argv, secrets)):
            run = wandb.init(
                project=opts.get("project") or "lazymem",
                entity=opts.get("entity") or None,
                mode=mode,
                group=group(opts, run_dir),
                job_type=str(OmegaConf.select(cfg, "task") or "run"),
                name=run_name(run_dir),
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
