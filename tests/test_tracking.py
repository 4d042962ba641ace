"""Run tracking with W&B (lazymem/tracking.py): what gets logged, secrets kept out, offline by default.

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
from omegaconf import DictConfig, OmegaConf

from lazymem import tracking
from lazymem.eval.metrics import summarize

from conftest import ROOT, read_wandb, run_cli

matplotlib.use("Agg")

SECRET = "sk-fake-0123456789abcdef"
KEY_ENV = "LAZYMEM_FAKE_TRACKING_KEY"
# never online, no error reports, no terminal chatter
QUIET = {"WANDB_ERROR_REPORTING": "false", "WANDB_SILENT": "true", "WANDB_API_KEY": None}


# --- fixtures: an evaluate-like run directory ------------------------------------------------------


def _record(qid, method, qtype, correct, tokens=100, total=2.0, status="ok", answer="an answer"):
    return {
        "qid": qid,
        "method": method,
        "type": qtype,
        "abstention": False,
        "question": f"question {qid}?",
        "reference": "Clover",
        "gold_idx": [3],
        "retrieved": [3, 9],
        "shown": [3],
        "decided": None,
        "windows": [],
        "memory": "memory",
        "answer": answer,
        "correct": correct if status == "ok" else None,
        "status": status,
        "error": None if status == "ok" else "TimeoutError: judge",
        "memory_tokens": tokens,
        "latency_s": {"retrieval": 0.1, "processing": 0.4, "answer": 1.0, "judge": 0.5, "total": total},
    }


RECORDS = [
    _record("q1", "lazymem", "multi-session", True, answer="x" * 5000),
    _record("q2", "lazymem", "knowledge-update", False),
    _record("q1", "rag", "multi-session", True, tokens=9000, total=1.5),
    _record("q2", "rag", "knowledge-update", None, status="error"),
]


def _summary(records=RECORDS) -> dict:
    methods = {}
    for r in records:
        methods.setdefault(r["method"], []).append(r)
    return {
        "dataset": "synthetic",
        "methods": {m: summarize(rs) for m, rs in methods.items()},
        "llm": {"answer": {"calls": 4, "cache_hits": 1}},
        "resume_dropped": {"errors": 0, "torn_lines": 0},
    }


@pytest.fixture
def run_dir(tmp_path) -> Path:
    d = tmp_path / "12-00-00_evaluate_abc"
    d.mkdir()
    (d / "summary.json").write_text(json.dumps(_summary()))
    (d / "records.jsonl").write_text("".join(json.dumps(r) + "\n" for r in RECORDS))
    (d / "coverage.json").write_text(json.dumps({"n": 50, "radii": {"2": {"all_at_n": 0.75}}}))
    (d / "table1.csv").write_text("method,LJ\nlazymem,0.5\nrag,0.25\n")
    import matplotlib.pyplot as plt

    fig = plt.figure(figsize=(1, 1))
    fig.savefig(d / "tradeoff.png")
    plt.close(fig)
    return d


def _cfg(**logger) -> DictConfig:
    judge = {"api_key_env": KEY_ENV, "api_key": SECRET, "header": f"${{oc.env:{KEY_ENV},null}}"}
    base = {
        "task": "evaluate",
        "llm": {"judge": judge},
        "logger": {
            "backend": "wandb",
            "project": "lazymem",
            "entity": None,
            "mode": "offline",
            "group": None,
            "tags": ["t1"],
            "dir": None,
            "log_records": True,
            "max_records": 1000,
            **logger,
        },
    }
    return OmegaConf.create(base)


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
        for r in recs:
            kind = r.WhichOneof("record_type")
            if kind == "summary":
                for u in r.summary.update:
                    self.summary[u.key or "/".join(u.nested_key)] = json.loads(u.value_json)
            elif kind == "history":
                self.history |= {i.key or i.nested_key[0] for i in r.history.item}
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


# --- unit tests -------------------------------------------------------------------------------------


def test_summary_is_flattened_per_method_type_and_stage():
    flat = tracking.flatten_summary(_summary())
    assert flat["lazymem/accuracy"] == 0.5
    assert flat["lazymem/by_type/multi-session/accuracy"] == 1.0
    assert flat["lazymem/by_type/knowledge-update/accuracy"] == 0.0
    assert flat["lazymem/latency/total/p95"] == 2.0 and flat["lazymem/latency/retrieval/mean"] == 0.1
    assert flat["rag/latency/answer/median"] == 1.0 and flat["rag/errors"] == 1
    assert flat["rag/memory_tokens/mean"] == 9000 and flat["lazymem/memory_tokens/n"] == 2
    assert flat["lazymem/construction/gold_decided"] == 0
    assert flat["llm/answer/calls"] == 4 and flat["dataset"] == "synthetic"
    assert not any("error_messages" in k or "accuracy_by_type" in k for k in flat)
    assert all(isinstance(v, bool | int | float | str) for v in flat.values())
    # main_table: {benchmark: summary}
    both = tracking.flatten_summary({"synthetic": _summary(), "locomo": _summary()})
    assert both["locomo/lazymem/by_type/multi-session/accuracy"] == 1.0
    assert both["synthetic/rag/latency/total/p95"] == 1.5


def test_model_free_metrics_and_the_judge_are_flattened_like_accuracy():
    summary = _summary()
    summary["methods"]["lazymem"] |= {"f1": 0.4, "f1_by_type": {"temporal": 0.25, "single-hop": None}}
    summary["judge"] = {"model": "deepseek-v4-pro", "max_tokens": 10, "metrics": ["f1"]}
    flat = tracking.flatten_summary(summary)
    assert flat["lazymem/f1"] == 0.4 and flat["lazymem/by_type/temporal/f1"] == 0.25
    assert "lazymem/by_type/single-hop/f1" not in flat and not any("f1_by_type" in k for k in flat)
    assert flat["judge/model"] == "deepseek-v4-pro" and flat["judge/max_tokens"] == 10


def test_record_rows_are_a_fixed_column_subset_with_clipped_text():
    rows = tracking.record_rows(RECORDS, max_records=3)
    assert len(rows) == 3 and all(len(r) == len(tracking.RECORD_COLUMNS) for r in rows)
    row = dict(zip(tracking.RECORD_COLUMNS, rows[0], strict=True))
    assert row["method"] == "lazymem" and row["qid"] == "q1" and row["type"] == "multi-session"
    assert row["correct"] is True and row["latency_s"] == 2.0 and row["memory_tokens"] == 100
    assert len(row["answer"]) == tracking.MAX_CHARS and row["answer"].endswith("…")
    err = dict(zip(tracking.RECORD_COLUMNS, tracking.record_row(RECORDS[3]), strict=True))
    assert err["status"] == "error" and err["error"].startswith("TimeoutError") and err["correct"] is None
    assert tracking.record_row({"reference": 7, "latency_s": 1.5})[4:9] == ["7", None, None, None, 1.5]


def test_outputs_summary_reads_every_file_and_the_returned_scalars(run_dir):
    flat = tracking.outputs_summary(run_dir, {"questions": 8, "nested": {"a": 1}, "plots": ["x.png"]})
    assert flat["questions"] == 8 and "nested/a" not in flat and "plots" not in flat
    assert flat["coverage/radii/2/all_at_n"] == 0.75 and flat["lazymem/accuracy"] == 0.5
    assert list(tracking.images(run_dir)) == ["plots/tradeoff"]
    (run_dir / "wandb" / "run").mkdir(parents=True)
    (run_dir / "wandb" / "run" / "media.png").write_bytes(b"")
    (run_dir / "synthetic").mkdir()
    (run_dir / "synthetic" / "records.jsonl").write_text("")
    assert list(tracking.images(run_dir)) == ["plots/tradeoff"]
    assert list(tracking.records_files(run_dir)) == ["records", "synthetic/records"]


def test_mode_from_the_environment_wins_over_the_config():
    assert tracking.resolve_mode({"mode": "online"}, {"WANDB_MODE": "offline"}) == "offline"
    assert tracking.resolve_mode({"mode": "online"}, {}) == "online"
    assert tracking.resolve_mode({"mode": None}, {}) == "offline"
    assert tracking.resolve_mode({}, {"WANDB_MODE": ""}) == "offline"


def test_secrets_are_removed_from_the_config_and_the_command_line(monkeypatch):
    monkeypatch.setenv(KEY_ENV, SECRET)
    cfg = _cfg()
    config = tracking.wandb_config(cfg)
    assert SECRET not in json.dumps(config)
    assert config["llm"]["judge"]["api_key"] == "<redacted>"
    assert config["llm"]["judge"]["header"] == "<redacted>"  # an interpolation of the key variable
    assert config["llm"]["judge"]["api_key_env"] == KEY_ENV and config["logger"]["project"] == "lazymem"
    argv = tracking.redacted_argv(
        ["task=x", f"+llm.judge.api_key={SECRET}", f"llm.x.url=http://h/?k={SECRET}", "llm.api_key_env=K"],
        [SECRET],
    )
    assert argv == [
        "task=x",
        "+llm.judge.api_key=<redacted>",
        "llm.x.url=http://h/?k=<redacted>",
        "llm.api_key_env=K",
    ]


def test_subprocess_env_for_trainers(tmp_path):
    base = {"PATH": "/bin", "WANDB_MODE": "offline"}
    env = tracking.subprocess_env(_cfg(mode="online", entity="team", group="g1"), tmp_path, "sft", base)
    assert env["PATH"] == "/bin" and env["WANDB_PROJECT"] == "lazymem" and env["WANDB_ENTITY"] == "team"
    assert env["WANDB_MODE"] == "offline"  # the environment's own mode wins
    assert env["WANDB_DIR"] == str(tmp_path.resolve()) and env["WANDB_NAME"] == "sft"
    assert env["WANDB_RUN_GROUP"] == "g1" and env["WANDB_TAGS"] == "t1"
    env = tracking.subprocess_env(_cfg(mode="online"), tmp_path, "grpo", {"PATH": "/bin"})
    assert env["WANDB_MODE"] == "online" and "WANDB_ENTITY" not in env and "WANDB_RUN_GROUP" not in env
    off = tracking.subprocess_env(OmegaConf.create({"logger": {"backend": "none"}}), tmp_path, "sft", base)
    assert off == {"PATH": "/bin", "WANDB_MODE": "disabled"}
    assert tracking.subprocess_env(OmegaConf.create({}), tmp_path, "sft", {})["WANDB_MODE"] == "disabled"


def test_logger_none_does_nothing_and_never_imports_wandb(tmp_path):
    code = (
        "import sys; from omegaconf import OmegaConf; import lazymem.runner; from lazymem import tracking\n"
        f"t = tracking.start(OmegaConf.create({{'logger': {{'backend': 'none'}}}}), {str(tmp_path)!r})\n"
        f"t.finish({str(tmp_path)!r}, {{'x': 1}}, ok=False)\n"
        "assert not t.active and t.files is None\n"
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
                self.summary, self.logged, self.exit_code = {}, [], None
                self.settings = types.SimpleNamespace(sync_dir="/nonexistent")

            def log(self, data):
                self.logged.append(data)

            def finish(self, exit_code=0):
                self.exit_code = exit_code

        class Table:
            def __init__(self, columns, data, allow_mixed_types=False):
                self.columns, self.data = columns, data

        class Image:
            def __init__(self, path):
                self.path = path

        self.Run, self.Table, self.Image = Run, Table, Image
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
    tracker = tracking.start(_cfg(), run_dir)
    assert tracker.active and sys.argv[1] == f"+llm.judge.api_key={SECRET}"  # restored
    (init,) = fake.inits
    assert init["name"] == run_dir.name and init["mode"] == "offline" and init["group"] is None
    assert init["job_type"] == "evaluate" and init["dir"] == str(run_dir) and init["tags"] == ["t1"]
    assert init["project"] == "lazymem" and init["entity"] is None
    assert SECRET not in json.dumps(init["config"]) and SECRET not in " ".join(init["argv"])
    tracker.finish(run_dir, {"questions": 2, "methods": {}}, ok=False)
    (run,) = fake.runs
    assert run.exit_code == 1 and fake.teardowns == 1
    assert run.summary["lazymem/accuracy"] == 0.5 and run.summary["questions"] == 2
    assert run.summary["lazymem/by_type/multi-session/accuracy"] == 1.0
    assert run.summary["run_dir"] == str(run_dir)
    (media,) = run.logged
    assert set(media) == {"records", "tables/table1", "plots/tradeoff"}
    assert media["records"].columns == list(tracking.RECORD_COLUMNS) and len(media["records"].data) == 4
    assert media["tables/table1"].columns == ["method", "LJ"]
    assert media["tables/table1"].data == [["lazymem", 0.5], ["rag", 0.25]]
    assert media["plots/tradeoff"].path == str(run_dir / "tradeoff.png")


def test_a_failure_while_logging_still_finishes_the_run(run_dir, monkeypatch, caplog):
    fake = FakeWandb()
    monkeypatch.setitem(sys.modules, "wandb", fake)
    monkeypatch.delenv("WANDB_MODE", raising=False)
    tracker = tracking.start(_cfg(log_records=False), run_dir)

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
        tracker = tracking.start(_cfg(), run_dir)
    assert not tracker.active and "tracking off" in caplog.text and "no-tty" in caplog.text
    tracker.finish(run_dir, {"x": 1}, ok=True)  # a no-op
    # online without credentials: not even an attempt (wandb would prompt on a terminal)
    fake = FakeWandb(logged_in=False)
    monkeypatch.setitem(sys.modules, "wandb", fake)
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="lazymem"):
        assert not tracking.start(_cfg(mode="online"), run_dir).active
    assert not fake.inits and "needs credentials" in caplog.text
    # WANDB_MODE=disabled: nothing at all
    monkeypatch.setenv("WANDB_MODE", "disabled")
    assert not tracking.start(_cfg(), run_dir).active and not fake.inits


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
    try:
        tracker = tracking.start(_cfg(max_records=3), run_dir)
        assert tracker.active and tracker.files.parent == run_dir / "wandb"
        tracker.finish(run_dir, {"questions": 2}, ok=True)
    finally:
        wandb.teardown()
    logged = Logged(run_dir)
    assert logged.folder == tracker.files
    assert logged.run.display_name == run_dir.name and logged.run.job_type == "evaluate"
    assert logged.config["llm"]["judge"]["api_key"] == "<redacted>" and logged.exit_code == 0
    assert logged.summary["lazymem/accuracy"] == 0.5 and logged.summary["questions"] == 2
    assert logged.summary["rag/latency/total/p95"] == 1.5
    assert logged.summary["lazymem/by_type/knowledge-update/accuracy"] == 0.0
    assert {"records", "tables/table1", "plots/tradeoff"} <= logged.history
    table = logged.table("records")
    assert table["columns"] == list(tracking.RECORD_COLUMNS) and len(table["data"]) == 3
    assert list((logged.folder / "files" / "media" / "images" / "plots").glob("tradeoff_*.png"))
    assert_no_secret(run_dir)


# --- through the CLI ---------------------------------------------------------------------------------


def _report_inputs(root: Path) -> Path:
    """A finished evaluate run for task=report to read (config.yaml + summary.json + records.jsonl)."""
    d = root / "inputs" / "0"
    d.mkdir(parents=True)
    cfg = {"task": "evaluate", "w": 2, "data": {"name": "synthetic"}, "retrieval": {"n": 50}, "methods": {}}
    (d / "config.yaml").write_text(yaml.safe_dump(cfg))
    (d / "summary.json").write_text(json.dumps(_summary()))
    (d / "records.jsonl").write_text("".join(json.dumps(r) + "\n" for r in RECORDS))
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
    assert logged.run.job_type == "report" and not logged.run.run_group
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
