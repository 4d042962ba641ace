"""The entry point end to end, as a user runs it (subprocesses of `python -m lazymem.run`)."""

import json
import subprocess
import sys

import yaml

from helpers import ROOT, run_cli


def test_runs_started_together_get_their_own_directories(tmp_path):
    # the default run-dir pattern, rooted in tmp_path: second resolution plus the per-process uid
    pattern = f"hydra.run.dir={tmp_path}/" + "${now:%H-%M-%S}_${task}_${lazymem_uid:}"
    cmd = [sys.executable, "-m", "lazymem.run", "data.loader.per_type=1", pattern]
    procs = [
        subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE) for _ in range(3)
    ]
    for p in procs:
        assert p.wait(timeout=300) == 0, p.stderr.read()
    dirs = [d for d in tmp_path.iterdir() if (d / "stats.json").exists()]
    assert len(dirs) == 3


def test_default_run_dir_is_unique_and_under_outputs(tmp_path):
    out = run_cli("data.loader.per_type=1")
    assert out.returncode == 0, out.stderr
    line = next(s for s in out.stderr.splitlines() + out.stdout.splitlines() if "run directory:" in s)
    run_dir = line.split("run directory:")[1].strip()
    assert "outputs/runs/" in run_dir and "_stats_" in run_dir
    assert json.loads((ROOT / run_dir / "meta.json").read_text())["status"] == "ok"


def test_secrets_never_reach_the_run_directory(tmp_path):
    secret = "sk-test-0123456789abcdef"
    out = run_cli(
        "+llm.judge.api_key_env=LAZYMEM_TEST_KEY",
        f"+llm.judge.api_key={secret}",
        f"hydra.run.dir={tmp_path}",
        env={"LAZYMEM_TEST_KEY": secret},
    )
    assert out.returncode == 0, out.stderr
    written = [p for p in tmp_path.rglob("*") if p.is_file()]
    assert any(p.name == "overrides.yaml" for p in written)
    for path in written:
        assert secret not in path.read_text(), path
    config = yaml.safe_load((tmp_path / "config.yaml").read_text())
    assert config["llm"]["judge"]["api_key"] == "<redacted>"
    assert config["llm"]["judge"]["api_key_env"] == "LAZYMEM_TEST_KEY"


def test_bad_data_path_fails_with_one_clear_message(tmp_path):
    out = run_cli("data=longmemeval", f"data.path={tmp_path}/missing.json", f"hydra.run.dir={tmp_path}/run")
    assert out.returncode != 0
    assert f"file {tmp_path}/missing.json: no such file" in out.stderr
    assert "Traceback" not in out.stderr
    assert json.loads((tmp_path / "run" / "meta.json").read_text())["status"] == "failed"


def test_unknown_task_is_reported(tmp_path):
    out = run_cli("task=nope", f"hydra.run.dir={tmp_path}")
    assert out.returncode != 0 and "unknown task 'nope'" in out.stderr
