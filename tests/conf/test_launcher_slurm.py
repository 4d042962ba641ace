"""The SLURM launcher config (+launcher=slurm) composes onto Hydra's submitit plugin, and a sweep runs
through submitit for real with its local executor (no SLURM here)."""

import json

import pytest
import yaml

from helpers import run_cli

pytest.importorskip("hydra_plugins.hydra_submitit_launcher", reason="optional extra `slurm` not installed")


def test_slurm_launcher_composes_with_its_values():
    out = run_cli(
        "--cfg", "hydra", "+launcher=slurm", "hydra.launcher.partition=gpu", "hydra.launcher.timeout_min=30"
    )
    assert out.returncode == 0, out.stderr
    launcher = yaml.safe_load(out.stdout)["hydra"]["launcher"]
    assert launcher["_target_"] == "hydra_plugins.hydra_submitit_launcher.submitit_launcher.SlurmLauncher"
    assert launcher["partition"] == "gpu" and launcher["timeout_min"] == 30
    assert launcher["gpus_per_node"] == 1 and launcher["cpus_per_task"] == 8 and launcher["mem_gb"] == 64
    assert launcher["array_parallelism"] == 16 and launcher["setup"] == []


@pytest.mark.slow
def test_a_two_job_sweep_through_submitit(tmp_path):
    out = run_cli(
        "-m",
        "hydra/launcher=submitit_local",
        "hydra.launcher.timeout_min=10",
        "task=stats",
        "data.loader.per_type=1,2",
        f"hydra.sweep.dir={tmp_path}",
        timeout=600,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    summary = json.loads((tmp_path / "sweep_summary.json").read_text())
    assert summary["ok"] == 2 and summary["failed"] == []
    questions = {json.loads((tmp_path / j / "stats.json").read_text())["questions"] for j in ("0", "1")}
    assert len(questions) == 2  # each job ran its own override
    assert list((tmp_path / ".submitit").iterdir())  # the jobs went through submitit
