"""The run lifecycle (lazymem/runner.py) under faults, through the real CLI: bad values, reruns, resumes
with other configs, a dead endpoint, and (slow) SIGINT/SIGTERM and killed llama.cpp servers mid-run; and the
seeding of each run.

The slow tests run `task=evaluate` with Oracle Turn (two calls per question: answer and judge) on the
bundled SmolLM2-135M with the response cache off, so every run talks to a real server.
"""

import json
import os
import random
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from lazymem.runner import seed_everything

from helpers import ROOT, SMOLLM2, run_cli

SMALL = [
    "task=evaluate",
    "method=oracle_turn",
    *SMOLLM2,
    "llm.common.decoding.max_tokens=48",
    "llm.cache=false",
    "data.loader.per_type=1",
    "data.loader.abstention=1",
    "logger=none",
]
QUESTIONS = 7


def files(run_dir: Path) -> dict[str, bytes]:
    return {str(p.relative_to(run_dir)): p.read_bytes() for p in sorted(run_dir.rglob("*")) if p.is_file()}


def meta(run_dir: Path) -> dict:
    return json.loads((run_dir / "meta.json").read_text())


def records(run_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (run_dir / "records.jsonl").read_text().splitlines()]


# ---- fast: no model server is started -------------------------------------------------------------


@pytest.mark.parametrize(
    "override, message",
    [
        ("w=-1", "w = -1: must be an integer >= 0"),
        ("retrieval.n=0", "retrieval.n = 0: must be an integer >= 1"),
        (
            "+methods.x=nosuch",
            "methods.x = 'nosuch' is not a method config: add one with +method@methods.x=NAME",
        ),
        ("llm.common.backend=nosuch", "llm.roles.answer.backend = 'nosuch': allowed values are llamacpp"),
    ],
)
def test_bad_value_stops_before_any_server(tmp_path, override, message):
    out = run_cli("+experiment=quickstart", override, f"hydra.run.dir={tmp_path}")
    assert out.returncode == 1
    assert message in out.stderr and "Traceback" not in out.stderr
    assert not (tmp_path / "servers").exists()  # no model server was started
    assert meta(tmp_path)["status"] == "failed"


def test_rerun_into_a_finished_directory_is_refused_and_changes_nothing(tmp_path):
    assert run_cli("data.loader.per_type=1", f"hydra.run.dir={tmp_path}").returncode == 0
    before = files(tmp_path)
    out = run_cli("data.loader.per_type=1", f"hydra.run.dir={tmp_path}")
    assert out.returncode != 0 and "Traceback" not in out.stderr
    assert f"{tmp_path} already holds a run (status ok); continue it with resume=true" in out.stderr
    assert files(tmp_path) == before


def test_resume_refuses_a_results_change_and_accepts_a_speed_change(tmp_path):
    assert run_cli("data.loader.per_type=1", f"hydra.run.dir={tmp_path}").returncode == 0
    before = files(tmp_path)
    out = run_cli("data.loader.per_type=1", "w=0", "resume=true", f"hydra.run.dir={tmp_path}")
    assert out.returncode != 0 and "resume=true refused" in out.stderr and "  - w: 2 -> 0" in out.stderr
    assert files(tmp_path) == before
    out = run_cli(
        "data.loader.per_type=1", "llm.common.concurrency=4", "resume=true", f"hydra.run.dir={tmp_path}"
    )
    assert out.returncode == 0, out.stderr
    assert meta(tmp_path)["status"] == "ok" and (tmp_path / "meta.0.json").exists()


def test_a_run_whose_questions_all_fail_exits_non_zero_as_failed(tmp_path):
    dead = [
        "llm.common.backend=endpoint",
        "llm.common.base_url=http://127.0.0.1:9/v1",
        "llm.common.max_retries=0",
        "task=evaluate",
        "method=oracle_turn",
        "data.limit=2",
    ]
    out = run_cli(*dead, f"paths.cache={tmp_path}/cache", f"hydra.run.dir={tmp_path}/a")
    assert out.returncode == 1 and "2 of 2 questions failed" in out.stderr
    assert (tmp_path / "cache" / "llm.sqlite").exists()  # paths.cache moves the LLM response cache too
    m = meta(tmp_path / "a")
    assert m["status"] == "failed" and m["questions"]["errors"] == 2 and m["questions"]["error_rate"] == 1.0
    out = run_cli(*dead, "max_error_rate=1.0", f"hydra.run.dir={tmp_path}/b")  # an explicit error budget
    assert out.returncode == 0, out.stderr
    assert meta(tmp_path / "b")["status"] == "failed"


def test_seed_everything_seeds_python_and_numpy():
    seed_everything(11)
    first = (random.random(), np.random.rand())
    seed_everything(11)
    assert (random.random(), np.random.rand()) == first
    seed_everything(12)
    assert (random.random(), np.random.rand()) != first


# ---- slow: a real llama.cpp server ------------------------------------------------------------------


def start(run_dir: Path, *extra: str, env: dict) -> subprocess.Popen:
    cmd = [sys.executable, "-m", "lazymem.run", *SMALL, *extra, f"hydra.run.dir={run_dir}"]
    return subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def wait_for(predicate, proc: subprocess.Popen, timeout: float = 600) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert proc.poll() is None, f"the run ended too early: {proc.communicate()[1][-3000:]}"
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.2)


def n_records(run_dir: Path) -> int:
    path = run_dir / "records.jsonl"
    return len(path.read_text().splitlines()) if path.exists() else 0


def server_pids(run_dir: Path) -> list[int]:
    log = run_dir / "lazymem.log"
    text = log.read_text() if log.exists() else ""
    return [int(p) for p in re.findall(r"started smollm2-135m \(pid (\d+)\)", text)]


def alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z"
    except OSError:
        return False


@pytest.fixture(scope="module")
def cpu_env(tmp_path_factory):
    return {**os.environ, "LAZYMEM_CACHE": str(tmp_path_factory.mktemp("cache"))}


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory, cpu_env):
    run_dir = tmp_path_factory.mktemp("baseline")
    out = run_cli(*SMALL, f"hydra.run.dir={run_dir}", env=cpu_env, timeout=900)
    assert out.returncode == 0, out.stderr[-3000:]
    return {(r["method"], r["qid"]): (r["answer"], r["correct"]) for r in records(run_dir)}


@pytest.mark.slow
@pytest.mark.solo
@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_signal_stops_cleanly_and_resume_finishes_the_same_run(tmp_path, cpu_env, uninterrupted, sig):
    proc = start(tmp_path, env=cpu_env)
    wait_for(lambda: n_records(tmp_path) >= 2, proc)
    os.kill(proc.pid, sig)
    t0 = time.monotonic()
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 128 + sig, err[-3000:]
    assert time.monotonic() - t0 < 60  # prompt: no retries against the stopped server
    assert f"interrupted by {sig.name}" in err and "resume=true" in err and "Traceback" not in err
    assert meta(tmp_path)["status"] == "interrupted"
    before = records(tmp_path)
    assert 2 <= len(before) < QUESTIONS and all(r["status"] == "ok" for r in before)
    assert not any(alive(pid) for pid in server_pids(tmp_path))
    out = run_cli(*SMALL, "resume=true", f"hydra.run.dir={tmp_path}", env=cpu_env, timeout=900)
    assert out.returncode == 0, out.stderr[-3000:]
    after = records(tmp_path)
    assert after[: len(before)] == before  # nothing lost or rewritten
    keys = [(r["method"], r["qid"]) for r in after]
    assert len(keys) == len(set(keys)) == QUESTIONS
    assert {k: (r["answer"], r["correct"]) for k, r in zip(keys, after, strict=True)} == uninterrupted
    assert meta(tmp_path)["status"] == "ok" and json.loads((tmp_path / "meta.0.json").read_text())[
        "status"
    ] == ("interrupted")


@pytest.mark.slow
@pytest.mark.solo
def test_a_server_killed_once_is_restarted_and_the_run_completes(tmp_path, cpu_env):
    proc = start(tmp_path, env=cpu_env)
    wait_for(lambda: n_records(tmp_path) >= 2 and server_pids(tmp_path), proc)
    os.kill(server_pids(tmp_path)[0], signal.SIGKILL)
    _, err = proc.communicate(timeout=900)
    assert proc.returncode == 0, err[-3000:]
    assert len(server_pids(tmp_path)) == 2  # started, restarted
    recs = records(tmp_path)
    assert len(recs) == QUESTIONS and all(r["status"] == "ok" for r in recs)
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["llm"]["server_restarts"] == {"smollm2-135m": 1}
    assert meta(tmp_path)["status"] == "ok"


@pytest.mark.slow
@pytest.mark.solo
def test_a_server_killed_twice_stops_the_run_naming_its_log(tmp_path, cpu_env):
    proc = start(tmp_path, env=cpu_env)
    wait_for(lambda: n_records(tmp_path) >= 1 and server_pids(tmp_path), proc)
    os.kill(server_pids(tmp_path)[0], signal.SIGKILL)
    wait_for(lambda: len(server_pids(tmp_path)) == 2, proc)
    done = n_records(tmp_path)
    wait_for(lambda: n_records(tmp_path) > done, proc)
    os.kill(server_pids(tmp_path)[1], signal.SIGKILL)
    _, err = proc.communicate(timeout=300)
    assert proc.returncode == 1, err[-3000:]
    assert "died (exit code -9) after 1 restart(s); log " in err and "/servers/llamacpp-smollm2-135m-" in err
    assert "Traceback" not in err
    m = meta(tmp_path)
    assert m["status"] == "failed" and "died" in m["error"]
    assert n_records(tmp_path) < QUESTIONS
