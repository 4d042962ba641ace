"""One stage's process: its outcome, its error line, its GPUs, its stop, the guard after it."""

import json
import sys
import time
from dataclasses import replace

from lazymem.chain.process import Job, error_line, gpu_env, run_job


def job(tmp_path, code, **kw):
    return Job(
        name="s",
        cmd=(sys.executable, "-c", code),
        cwd=str(tmp_path),
        run_dir=str(tmp_path / "s"),
        log=str(tmp_path / "s.log"),
        **kw,
    )


def never():
    return False


def test_a_stage_that_succeeds_is_ok_and_its_output_is_logged(tmp_path, capsys):
    result = run_job(job(tmp_path, "print('hello from the stage')"), never)
    assert result.status == "ok" and result.returncode == 0 and result.duration_s >= 0
    assert "hello from the stage" in (tmp_path / "s.log").read_text()
    assert "hello from the stage" in capsys.readouterr().out


def test_a_failed_stage_reports_its_own_meta_error_or_its_last_line(tmp_path):
    code = (
        "import json, os; os.makedirs('s', exist_ok=True); "
        "json.dump({'status': 'failed', 'error': 'error: no data\\n  at all'}, open('s/meta.json', 'w')); "
        "raise SystemExit(1)"
    )
    assert run_job(job(tmp_path, code), never).error == "error: no data at all"
    (tmp_path / "s.log").unlink()
    stale = run_job(job(tmp_path, "print('boom: the last words'); raise SystemExit(3)"), never)
    assert stale.status == "failed" and stale.error == "boom: the last words"  # the old meta.json is not it
    assert error_line(tmp_path / "none", None, tmp_path / "s.log", 3) == "boom: the last words"


def test_a_stop_request_terminates_the_stage_as_interrupted(tmp_path):
    code = "import signal, sys, time; signal.signal(signal.SIGTERM, lambda *a: sys.exit(143)); time.sleep(60)"
    t0 = time.monotonic()
    result = run_job(job(tmp_path, code), lambda: time.monotonic() - t0 > 1)
    assert result.status == "interrupted" and result.returncode == 143
    assert time.monotonic() - t0 < 10


def test_a_stage_that_ignores_sigterm_is_killed_after_the_bound(tmp_path):
    code = "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); print('up', flush=True); "
    code += "time.sleep(60)"
    t0 = time.monotonic()
    result = run_job(job(tmp_path, code, stop_timeout_s=1), lambda: "up" in (tmp_path / "s.log").read_text())
    assert result.status == "interrupted" and result.returncode == -9 and time.monotonic() - t0 < 10


def test_gpus_come_from_ray_and_a_cpu_stage_sees_none(tmp_path, monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0,1,2,3")
    assert gpu_env(job(tmp_path, "", gpus=2), [3, 1])["CUDA_VISIBLE_DEVICES"] == "3,1"
    assert gpu_env(job(tmp_path, "", gpus=0), [])["CUDA_VISIBLE_DEVICES"] == ""


def test_a_stage_is_not_tied_to_the_chains_raylet(tmp_path, monkeypatch):
    # what a Ray worker's environment holds (seen in a task on ray 2.60): a job that starts its own Ray
    # (VERL) must not fate-share with the chain's raylet or take its job id
    monkeypatch.setenv("RAY_RAYLET_PID", "4242")
    monkeypatch.setenv("RAY_JOB_ID", "ffffffff")
    monkeypatch.setenv("RAY_USAGE_STATS_ENABLED", "0")
    env = gpu_env(job(tmp_path, "", gpus=1), [0])
    assert "RAY_RAYLET_PID" not in env and "RAY_JOB_ID" not in env and env["RAY_USAGE_STATS_ENABLED"] == "0"


def test_the_guard_fails_a_training_stage_that_holds_a_test_id(tmp_path):
    (tmp_path / "split.json").write_text(json.dumps({"train": ["a"], "val": [], "test": ["q9"]}))
    code = "import json, os; os.makedirs('s', exist_ok=True); "
    code += "json.dump([{'question_id': 'q9'}], open('s/lazymem_sft.json', 'w'))"
    guarded = job(tmp_path, code, split=str(tmp_path / "split.json"), training_files=("lazymem_sft*.json",))
    result = run_job(guarded, never)
    assert result.status == "failed" and "lazymem_sft.json: 1 (q9)" in result.error
    # the files its task declares, and only those
    assert run_job(replace(guarded, training_files=("*.parquet",)), never).status == "ok"
