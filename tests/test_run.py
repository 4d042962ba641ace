"""The entry point: its commands' dispatch, `lazymem ls`, and runs end to end as a user starts them
(subprocesses of `python -m lazymem.run`)."""

import json
import os
import subprocess
import sys

import pytest
import yaml

import lazymem.agent.mcp_server
import lazymem.agent.service
import lazymem.agent.transfer
import lazymem.runner
from lazymem import run, tasks
from lazymem.conf import CONF_DIR

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


def test_unknown_task_is_reported_by_the_run_command_too(tmp_path):
    out = run_cli("run", "task=nope", f"hydra.run.dir={tmp_path}")
    assert out.returncode != 0 and "unknown task 'nope'" in out.stderr and "lazymem ls" in out.stderr


@pytest.fixture
def called(monkeypatch):
    """What each command reached: the runner's main (with the argv Hydra reads) and the agent's entries."""
    seen = []
    monkeypatch.setattr(sys, "argv", ["lazymem"])
    monkeypatch.setattr(lazymem.runner, "main", lambda: seen.append(("run", sys.argv[1:])))
    monkeypatch.setattr(lazymem.agent.service, "serve", lambda argv: seen.append(("serve", argv)) or 3)
    monkeypatch.setattr(lazymem.agent.mcp_server, "main", lambda argv: seen.append(("mcp", argv)))
    monkeypatch.setattr(lazymem.agent.transfer, "main", lambda kind, argv: seen.append((kind, argv)) or 0)
    return seen


def exit_status(argv) -> int | None:
    with pytest.raises(SystemExit) as stop:
        run.cli(argv)
    return stop.value.code


@pytest.mark.parametrize(
    ("argv", "reached", "status"),
    [
        (["run", "task=stats", "w=1"], ("run", ["task=stats", "w=1"]), 0),
        # bare overrides are a run's, as `python -m lazymem.run +experiment=...` has always taken them
        (["task=stats", "+experiment=quickstart"], ("run", ["task=stats", "+experiment=quickstart"]), 0),
        ([], ("run", []), 0),
        (["doctor", "llm=cpu"], ("run", ["task=doctor", "logger=none", "llm=cpu"]), 0),
        (["serve", "method=rag"], ("serve", ["method=rag"]), 3),
        (["mcp", "method=rag"], ("mcp", ["method=rag"]), None),
        (["import", "--input", "x.jsonl"], ("import", ["--input", "x.jsonl"]), 0),
        (["export", "--output", "y.jsonl"], ("export", ["--output", "y.jsonl"]), 0),
    ],
)
def test_each_command_reaches_its_entry_with_its_arguments(called, argv, reached, status):
    assert exit_status(argv) == status
    assert called == [reached]


def test_ls_lists_every_task_and_experiment_on_one_line_each(called, capsys):
    assert exit_status(["ls"]) == 0 and called == []
    lines = capsys.readouterr().out.splitlines()
    listed = {line.split()[0] for line in lines if line.startswith("  ")}
    experiments = {p.stem for p in (CONF_DIR / "experiment").glob("*.yaml")}
    assert listed == set(tasks.NAMES) | experiments and len(lines) == len(tasks.NAMES) + len(experiments) + 3
    assert "  stats " in "\n".join(lines) and "what is in the selected data" in "\n".join(lines)
    assert any(line.split()[:1] == ["quickstart"] and "The README's main job" in line for line in lines)
    assert exit_status(["ls", "extra"]) == "error: lazymem ls takes no arguments, got extra"


def test_a_description_is_cut_at_its_first_clause_outside_brackets():
    assert run.gist("Table 11 end to end (paper Appendix E.1): rollouts, then more") == (
        "Table 11 end to end (paper Appendix E.1)"
    )
    assert run.gist("served (LlamaCppServer; a GGUF); then") == "served (LlamaCppServer; a GGUF)"
    assert run.gist("no stop at all") == "no stop at all"


LS_IMPORTS = """
import sys
from lazymem.run import ls
ls([])
print(sorted(m for m in sys.modules if m.startswith(("lazymem.tasks.", "lazymem.runner", "torch"))))
"""


def test_ls_into_a_pipe_closed_early_ends_without_a_traceback():
    """As `lazymem ls | head -1`, made certain: the reader has closed its end before anything is written."""
    read, write = os.pipe()
    os.close(read)
    cmd = [sys.executable, "-m", "lazymem.run", "ls"]
    out = subprocess.run(cmd, cwd=ROOT, stdout=write, stderr=subprocess.PIPE, timeout=60)
    os.close(write)
    assert out.returncode == 1 and out.stderr.decode() == ""


def test_ls_reads_the_tasks_without_importing_them():
    out = subprocess.run(
        [sys.executable, "-c", LS_IMPORTS], capture_output=True, text=True, cwd=ROOT, timeout=60
    )
    assert out.stdout.splitlines()[-1] == "['lazymem.tasks.contract']", out.stderr[-2000:]
