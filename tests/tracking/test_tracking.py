"""Run tracking with W&B (lazymem/tracking/): what gets logged live and at the end, secrets kept out,
offline by default.

Unit tests use a fake `wandb` module; the others run the real wandb in offline mode (no network) and read
what it wrote back with a small reader of its transaction log (`run-*.wandb`, leveldb-log records of
protobuf `Record`s; wandb 0.31 writes no wandb-summary.json offline).
"""

from __future__ import annotations

import json
import logging
import subprocess
import sys
import time
import types
from pathlib import Path

import matplotlib
import pytest
import yaml

from lazymem import tracking
from lazymem.tracking import outputs

from helpers import ROOT, read_wandb, run_cli
from helpers_runs import (
    KEY_ENV,
    SECRET,
    TRACKED_RECORDS,
    tracked_record,
    tracked_summary,
    tracking_cfg,
)

matplotlib.use("Agg")

# never online, no error reports, no terminal chatter
QUIET = {"WANDB_ERROR_REPORTING": "false", "WANDB_SILENT": "true", "WANDB_API_KEY": None}


# --- reading what wandb wrote -----------------------------------------------------------------------


class Logged:
    """A finished offline run: its folder, run record, config, summary, history keys and exit code."""

    def __init__(self, run_dir: Path):
        (self.folder,) = (run_dir / "wandb").glob("offline-run-*")
        (self.file,) = self.folder.glob("run-*.wandb")
        recs = read_wandb(self.file)
        self.run = next(r.run for r in recs if r.WhichOneof("record_type") == "run")
        self.config = {u.key: json.loads(u.value_json) for u in self.run.config.update if u.key != "_wandb"}
        self.summary, self.history, self.exit_code = {}, set(), None
        self.rows: list[tuple[int, dict]] = []  # (step, {key: value}) of each history row
        self.artifacts = {}  # type -> {path in the artifact: its reference (file:// URI) or ""}
        for r in recs:
            kind = r.WhichOneof("record_type")
            if kind == "summary":
                for u in r.summary.update:
                    self.summary[u.key or "/".join(u.nested_key)] = json.loads(u.value_json)
            elif kind == "history":
                # a scalar: one key; a logged media object: nested keys under its name (`_type`, ...)
                row = {}
                for i in r.history.item:
                    scalar = bool(i.key) or len(i.nested_key) == 1
                    row[i.key or i.nested_key[0]] = json.loads(i.value_json) if scalar else None
                self.rows.append((r.history.step.num, row))
                self.history |= {k for k in row if not k.startswith("_")}
            elif kind == "artifact":
                self.artifacts[r.artifact.type] = {e.path: e.ref for e in r.artifact.manifest.contents}
            elif kind == "exit":
                self.exit_code = r.exit.exit_code

    def table(self, key: str) -> dict:
        (path,) = (self.folder / "files").glob(f"media/table/{key}_*.table.json")
        return json.loads(path.read_text())


def assert_no_secret(root: Path, secret: str = SECRET):
    for path in root.rglob("*"):
        if path.is_file():
            assert secret.encode() not in path.read_bytes(), path


def _wandb_core() -> dict[int, int]:
    """Running wandb-core service processes: pid -> the pid of the process they serve."""
    found = {}
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            argv = (proc / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if argv and argv[0].endswith(b"wandb-core") and b"--pid" in argv:
            found[int(proc.name)] = int(argv[argv.index(b"--pid") + 1])
    return found


@pytest.fixture
def no_leaked_service():
    """After the test: no wandb-core service it started outlives the process it served."""
    before = set(_wandb_core())
    yield
    deadline = time.time() + 15
    while True:
        leaked = {
            pid: parent
            for pid, parent in _wandb_core().items()
            if pid not in before and not Path(f"/proc/{parent}").exists()
        }
        if not leaked or time.time() > deadline:
            break
        time.sleep(0.2)
    assert not leaked, f"wandb-core left running: {leaked}"


# --- the tracker with a fake wandb (the run directory: conftest.py's run_dir) -------------------------


def test_logger_none_does_nothing_and_never_imports_wandb(tmp_path):
    code = (
        "import sys; from omegaconf import OmegaConf; import lazymem.runner; from lazymem import tracking\n"
        f"t = tracking.start(OmegaConf.create({{'logger': {{'backend': 'none'}}}}), {str(tmp_path)!r})\n"
        f"t.finish({str(tmp_path)!r}, {{'x': 1}}, ok=False)\n"
        "assert not t.active and t.files is None and t.on_record('synthetic') is None\n"
        "print('wandb' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "False"
    assert not list(tmp_path.iterdir())


class FakeWandb(types.ModuleType):
    """Just enough of the wandb module to see what the tracker hands it."""

    def __init__(self, fail_init=False, logged_in=True):
        super().__init__("wandb")
        self.fail_init, self.logged_in, self.inits, self.runs = fail_init, logged_in, [], []
        self.run, self.teardowns = None, 0
        fake = self

        class Run:
            def __init__(self):
                self.summary, self.logged, self.steps, self.artifacts, self.exit_code = {}, [], [], [], None
                self.settings = types.SimpleNamespace(sync_dir="/nonexistent")

            def log(self, data, step=None):
                self.logged.append(data)
                self.steps.append(step)

            def log_artifact(self, artifact):
                self.artifacts.append(artifact)

            def finish(self, exit_code=0):
                self.exit_code = exit_code

        class Table:
            def __init__(self, columns, data, allow_mixed_types=False):
                self.columns, self.data = columns, data

        class Image:
            def __init__(self, path):
                self.path = path

        class Artifact:
            def __init__(self, name, type, metadata):
                self.name, self.type, self.metadata, self.files, self.refs = name, type, metadata, {}, []

            def add_file(self, path, name):
                self.files[name] = path

            def add_reference(self, uri, checksum=True):
                self.refs.append((uri, checksum))

        self.Run, self.Table, self.Image, self.Artifact = Run, Table, Image, Artifact
        self.Settings = dict
        self.login = lambda **kw: fake.logged_in

    def teardown(self):
        self.teardowns += 1

    def init(self, **kwargs):
        self.inits.append({**kwargs, "argv": sys.argv[:]})
        if self.fail_init:
            raise RuntimeError("api_key not configured (no-tty)")
        self.runs.append(self.Run())
        return self.runs[-1]


def test_the_tracker_logs_what_the_run_directory_holds(run_dir, monkeypatch):
    fake = FakeWandb()
    monkeypatch.setitem(sys.modules, "wandb", fake)
    monkeypatch.setenv(KEY_ENV, SECRET)
    monkeypatch.delenv("WANDB_MODE", raising=False)
    monkeypatch.setattr(sys, "argv", ["lazymem/run.py", f"+llm.judge.api_key={SECRET}"])
    tracker = tracking.start(tracking_cfg(), run_dir)
    assert tracker.active and sys.argv[1] == f"+llm.judge.api_key={SECRET}"  # restored
    (init,) = fake.inits
    assert init["name"] == run_dir.name and init["mode"] == "offline" and init["group"] == run_dir.name
    assert init["job_type"] == "evaluate" and init["dir"] == str(run_dir) and init["tags"] == ["t1"]
    assert init["project"] == "lazymem" and init["entity"] is None
    assert SECRET not in json.dumps(init["config"]) and SECRET not in " ".join(init["argv"])
    for record in TRACKED_RECORDS:
        tracker.on_record("synthetic")(record)
    tracker.finish(run_dir, {"questions": 2, "methods": {}}, ok=False)
    (run,) = fake.runs
    assert run.exit_code == 1 and fake.teardowns == 1
    assert run.summary["synthetic/lazymem/accuracy"] == 0.5 and run.summary["questions"] == 2
    assert run.summary["synthetic/lazymem/by_type/multi-session/accuracy"] == 1.0
    assert run.summary["run_dir"] == str(run_dir)
    *live, media = run.logged
    assert run.steps == [1, 2, 3, 4, 5] and [row["live/questions"] for row in live] == [1, 2, 3, 4]
    assert live[1]["live/synthetic/lazymem/accuracy"] == 0.5 and live[3]["live/synthetic/rag/errors"] == 1
    results = next(a for a in run.artifacts if a.type == "results")
    assert results.name == f"{run_dir.name}-results" and results.metadata["datasets"][0]["sha256"] == "ab12"
    assert results.files["summary.json"] == str(run_dir / "summary.json")
    assert set(media) == {"records", "tables/table1", "plots/tradeoff"}
    assert media["records"].columns == list(outputs.RECORD_COLUMNS) and len(media["records"].data) == 4
    assert media["tables/table1"].columns == ["method", "LJ"]
    assert media["tables/table1"].data == [["lazymem", 0.5], ["rag", 0.25]]
    assert media["plots/tradeoff"].path == str(run_dir / "tradeoff.png")


def test_a_failure_while_logging_still_finishes_the_run(run_dir, monkeypatch, caplog):
    fake = FakeWandb()
    monkeypatch.setitem(sys.modules, "wandb", fake)
    monkeypatch.delenv("WANDB_MODE", raising=False)
    tracker = tracking.start(tracking_cfg(log_records=False), run_dir)

    def broken(*a, **k):
        raise OSError("disk full")

    fake.Image = broken
    with caplog.at_level(logging.WARNING, logger="lazymem"):
        tracker.finish(run_dir, None, ok=True)
    assert fake.runs[0].exit_code == 0 and "disk full" in caplog.text


def test_a_tracker_that_cannot_start_is_one_warning(run_dir, monkeypatch, caplog):
    monkeypatch.delenv("WANDB_MODE", raising=False)
    fake = FakeWandb(fail_init=True)
    monkeypatch.setitem(sys.modules, "wandb", fake)
    with caplog.at_level(logging.WARNING, logger="lazymem"):
        tracker = tracking.start(tracking_cfg(), run_dir)
    assert not tracker.active and "tracking off" in caplog.text and "no-tty" in caplog.text
    tracker.finish(run_dir, {"x": 1}, ok=True)  # a no-op
    # online without credentials: not even an attempt (wandb would prompt on a terminal)
    fake = FakeWandb(logged_in=False)
    monkeypatch.setitem(sys.modules, "wandb", fake)
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="lazymem"):
        assert not tracking.start(tracking_cfg(mode="online"), run_dir).active
    assert not fake.inits and "needs credentials" in caplog.text
    # WANDB_MODE=disabled: nothing at all
    monkeypatch.setenv("WANDB_MODE", "disabled")
    assert not tracking.start(tracking_cfg(), run_dir).active and not fake.inits


# --- the real wandb, offline ------------------------------------------------------------------------


def test_real_offline_run_in_process(run_dir, monkeypatch, no_leaked_service):
    import wandb

    for k, v in QUIET.items():
        if v is None:
            monkeypatch.delenv(k, raising=False)
        else:
            monkeypatch.setenv(k, v)
    monkeypatch.delenv("WANDB_MODE", raising=False)
    monkeypatch.setenv(KEY_ENV, SECRET)
    monkeypatch.setenv("WANDB_DATA_DIR", str(run_dir / "wandb-data"))  # staged artifact files: checked too
    ckpt = run_dir.parent / "checkpoint"
    ckpt.mkdir()
    (ckpt / "model.safetensors").write_bytes(b"\0" * 1024)
    leaky = tracked_record("q3", "rag", "multi-session", None, status="error") | {
        "error": f"HTTP 401 key={SECRET}"
    }
    try:
        tracker = tracking.start(tracking_cfg(max_records=3), run_dir)
        assert tracker.active and tracker.files.parent == run_dir / "wandb"
        for record in [*TRACKED_RECORDS, leaky]:  # as task=evaluate calls it, one question after another
            tracker.on_record("synthetic")(record)
        tracker.finish(run_dir, {"questions": 2, "checkpoint": str(ckpt)}, ok=True)
    finally:
        wandb.teardown()
    logged = Logged(run_dir)
    assert logged.folder == tracker.files
    assert logged.run.display_name == run_dir.name and logged.run.job_type == "evaluate"
    assert logged.config["llm"]["judge"]["api_key"] == "<redacted>" and logged.exit_code == 0
    # live: one history row per question, at steps 1, 2, ... with the running numbers of its method
    steps = [step for step, _ in logged.rows]
    assert steps == sorted(set(steps)) and steps[:5] == [1, 2, 3, 4, 5]
    live = [row for _, row in logged.rows if "live/questions" in row]
    assert [row["live/questions"] for row in live] == [1, 2, 3, 4, 5]
    p = "live/synthetic/"
    assert live[0][p + "lazymem/accuracy"] == 1.0 and live[1][p + "lazymem/accuracy"] == 0.5
    assert live[1][p + "lazymem/memory_tokens"] == 100 and live[2][p + "rag/latency/total"] == 1.5
    assert live[4][p + "rag/errors"] == 2 and live[4][p + "rag/accuracy"] == pytest.approx(1 / 3)
    # the end: summary keys, tables, plots and artifacts of the run directory
    assert logged.summary["synthetic/lazymem/accuracy"] == 0.5 and logged.summary["questions"] == 2
    assert logged.summary["synthetic/rag/latency/total/p95"] == 1.5
    assert logged.summary["synthetic/lazymem/by_type/knowledge-update/accuracy"] == 0.0
    assert {"records", "tables/table1", "plots/tradeoff"} <= logged.history
    assert set(logged.artifacts["records"]) == {"records.jsonl"}
    assert {"summary.json", "meta.json", "table1.csv", "tradeoff.png"} <= set(logged.artifacts["results"])
    assert logged.artifacts["model"] == {"model.safetensors": (ckpt / "model.safetensors").as_uri()}
    table = logged.table("records")
    assert table["columns"] == list(outputs.RECORD_COLUMNS) and len(table["data"]) == 3
    assert list((logged.folder / "files" / "media" / "images" / "plots").glob("tradeoff_*.png"))
    assert_no_secret(run_dir)


# --- through the CLI ---------------------------------------------------------------------------------


def _report_inputs(root: Path) -> Path:
    """A finished evaluate run for task=report to read (config.yaml + summary.json + records.jsonl)."""
    d = root / "inputs" / "0"
    d.mkdir(parents=True)
    cfg = {"task": "evaluate", "w": 2, "data": {"name": "synthetic"}, "retrieval": {"n": 50}, "methods": {}}
    (d / "config.yaml").write_text(yaml.safe_dump(cfg))
    (d / "summary.json").write_text(json.dumps(tracked_summary()))
    (d / "records.jsonl").write_text("".join(json.dumps(r) + "\n" for r in TRACKED_RECORDS))
    return root / "inputs"


def test_cli_run_is_tracked_offline_by_default(tmp_path, no_leaked_service):
    inputs = _report_inputs(tmp_path)
    run_dir = tmp_path / "report"
    start = time.time()
    out = run_cli(
        "task=report",
        f"report.inputs=[{inputs}]",
        "logger=wandb",
        f"+llm.judge.api_key_env={KEY_ENV}",
        f"+llm.judge.api_key={SECRET}",
        f"hydra.run.dir={run_dir}",
        env={**QUIET, "WANDB_MODE": None, KEY_ENV: SECRET},
    )
    assert out.returncode == 0, out.stderr[-3000:]
    logged = Logged(run_dir)
    assert logged.run.display_name == "report" and logged.run.project == "lazymem"
    assert logged.run.job_type == "report" and logged.run.run_group == "report"  # its own name
    assert logged.config == yaml.safe_load((run_dir / "config.yaml").read_text())
    assert logged.config["llm"]["judge"]["api_key"] == "<redacted>" and logged.exit_code == 0
    assert logged.summary["run_dir"] == str(run_dir)
    plots = {p.stem for p in run_dir.glob("*.png")}
    assert plots and {f"plots/{p}" for p in plots} <= logged.history
    tables = {p.stem for p in run_dir.glob("*.csv")}
    assert tables and {f"tables/{t}" for t in tables} <= logged.history
    assert_no_secret(run_dir)
    print(f"report run with wandb offline: {time.time() - start:.1f} s")


def test_sweep_jobs_share_a_group_and_a_failed_job_closes_its_run(tmp_path, no_leaked_service):
    sweep = tmp_path / "sweep_7"
    out = run_cli(
        "-m",
        "task=nope,stats",
        "data.loader.per_type=1",
        "logger=wandb",
        "logger.mode=online",  # WANDB_MODE in the environment wins: offline
        f"hydra.sweep.dir={sweep}",
        env={**QUIET, "WANDB_MODE": "offline"},
    )
    assert out.returncode != 0 and "1 of 2 jobs failed" in out.stderr
    failed, ok = Logged(sweep / "0"), Logged(sweep / "1")
    assert failed.run.run_group == ok.run.run_group == "sweep_7"
    assert failed.exit_code == 1 and ok.exit_code == 0
    assert failed.run.display_name == "sweep_7/0" and ok.run.job_type == "stats"
    assert ok.summary["questions"] == 8 and ok.summary["dataset"] == "synthetic"
    assert json.loads((sweep / "1" / "meta.json").read_text())["status"] == "ok"


def test_online_without_credentials_runs_untracked(tmp_path, no_leaked_service):
    home = tmp_path / "home"
    home.mkdir()
    out = run_cli(
        "task=stats",
        "data.loader.per_type=1",
        "logger=wandb",
        "logger.mode=online",
        f"hydra.run.dir={tmp_path}/run",
        env={
            **QUIET,
            "WANDB_MODE": None,
            "HOME": str(home),
            "NETRC": str(home / ".netrc"),
            "WANDB_CONFIG_DIR": str(home / "wandb"),
        },
        timeout=120,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    assert "tracking off" in out.stdout + out.stderr and "needs credentials" in out.stdout + out.stderr
    assert (tmp_path / "run" / "stats.json").exists() and not (tmp_path / "run" / "wandb").exists()


def test_run_cli_turns_tracking_off_unless_asked(tmp_path):
    out = run_cli("task=stats", "data.loader.per_type=1", f"hydra.run.dir={tmp_path}")
    assert out.returncode == 0, out.stderr
    assert not (tmp_path / "wandb").exists()
    assert yaml.safe_load((tmp_path / "config.yaml").read_text())["logger"] == {"backend": "none"}
