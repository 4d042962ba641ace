"""The entry point end to end, as a user runs it (subprocesses of `python -m lazymem.run`)."""

import json
import subprocess
import sys

import yaml

from helpers import ROOT, run_cli


def test_stats_run_writes_config_meta_and_outputs(tmp_path):
    out = run_cli("task=stats", "data.loader.per_type=1", f"hydra.run.dir={tmp_path}")
    assert out.returncode == 0, out.stderr
    stats = json.loads((tmp_path / "stats.json").read_text())
    assert stats["questions"] == 8 and sum(stats["by_type"].values()) == 8
    assert stats["tokens_per_history"]["mean"] > 0
    config = yaml.safe_load((tmp_path / "config.yaml").read_text())
    assert config["task"] == "stats" and config["data"]["loader"]["per_type"] == 1
    meta = json.loads((tmp_path / "meta.json").read_text())
    assert meta["status"] == "ok" and meta["end"] >= meta["start"]
    assert set(meta["git"]) == {"commit", "dirty"} and meta["versions"]["lazymem"]
    (dataset,) = meta["datasets"]
    assert dataset["sha256"] == stats["source"]["sha256"] and len(dataset["sha256"]) == 64


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


def test_split_task_and_split_selection(tmp_path):
    out = run_cli(
        "task=split", "data.loader.per_type=5", "data.loader.abstention=0", f"hydra.run.dir={tmp_path}/s"
    )
    assert out.returncode == 0, out.stderr
    split = json.loads((tmp_path / "s" / "split.json").read_text())
    counts = json.loads((tmp_path / "s" / "split_counts.json").read_text())
    assert counts["total"] == {"train": 22, "val": 2, "test": 6, "total": 30}
    assert len(split["test"]) == 6
    out = run_cli(
        "data.split=test",
        f"data.split_file={tmp_path}/s/split.json",
        "data.loader.per_type=5",
        "data.loader.abstention=0",
        f"hydra.run.dir={tmp_path}/t",
    )
    assert out.returncode == 0, out.stderr
    stats = json.loads((tmp_path / "t" / "stats.json").read_text())
    assert stats["questions"] == 6
    # computing the split on the fly gives the same questions as the file
    out = run_cli(
        "data.split=test", "data.loader.per_type=5", "data.loader.abstention=0", f"hydra.run.dir={tmp_path}/u"
    )
    assert json.loads((tmp_path / "u" / "stats.json").read_text())["by_type"] == stats["by_type"]
    split["test"].append("no-such-question")
    (tmp_path / "bad.json").write_text(json.dumps(split))
    out = run_cli("data.split=test", f"data.split_file={tmp_path}/bad.json", f"hydra.run.dir={tmp_path}/v")
    assert out.returncode != 0
    assert f"file {tmp_path}/bad.json, record no-such-question, field 'test'" in out.stderr


def test_unknown_task_is_reported(tmp_path):
    out = run_cli("task=nope", f"hydra.run.dir={tmp_path}")
    assert out.returncode != 0 and "unknown task 'nope'" in out.stderr
