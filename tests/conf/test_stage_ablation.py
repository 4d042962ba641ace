"""+experiment=stage_ablation (paper Table 3): one job per training stage, each with its own memory model,
labelled by `stage` so that task=report builds Table 3 and the accuracy-by-stage plot."""

import pytest
import yaml
from hydra import compose, initialize_config_dir

from lazymem.conf import CONF_DIR as CONF
from lazymem.eval.summary import read_summary

from helpers import run_cli


def composed(*overrides: str):
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        return compose("config", overrides=["+experiment=stage_ablation", *overrides])


def test_each_stage_serves_its_own_checkpoint():
    models = {}
    for stage in ("base", "sft", "rl"):
        cfg = composed(f"stage={stage}", *(f"stages.{s}=/ckpt/{s}" for s in ("base", "sft", "rl")))
        assert cfg.task == "evaluate" and cfg.method.role == "memory"
        models[stage] = (cfg.llm.roles.memory.model, cfg.llm.roles.memory.served_name)
    assert models == {s: (f"/ckpt/{s}", f"lazymem-4b-{s}") for s in ("base", "sft", "rl")}


def test_the_sweep_is_defined_in_the_experiment():
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        cfg = compose("config", overrides=["+experiment=stage_ablation"], return_hydra_config=True)
    assert cfg.hydra.sweeper.params.stage == "base,sft,rl"


def test_a_stage_without_a_checkpoint_stops_before_starting(tmp_path):
    r = run_cli(
        "+experiment=stage_ablation_cpu",
        "stage=rl",
        f"hydra.run.dir={tmp_path}",
        env={"LAZYMEM_RL_MODEL": None},
    )
    assert r.returncode != 0
    assert "llm.roles.memory.model is not set: pass stages.rl=" in r.stderr
    assert not (tmp_path / "records.jsonl").exists()


@pytest.mark.slow
def test_stage_sweep_on_cpu_and_table3(tmp_path):
    """Two stages with two different bundled GGUFs as their 'checkpoints', then the report."""
    sweep = tmp_path / "sweep"
    out = run_cli(
        "-m",
        "+experiment=stage_ablation_cpu",
        "retrieval=bm25",
        "stage=base,sft",
        "data.loader.per_type=1",
        "data.limit=1",
        "retrieval.n=3",
        "w=0",
        f"hydra.sweep.dir={sweep}",
        env={"LAZYMEM_CACHE": str(tmp_path / "cache")},
        timeout=900,
        standin=True,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    served = {}
    for job in ("0", "1"):
        cfg = yaml.safe_load((sweep / job / "config.yaml").read_text())
        served[cfg["stage"]] = cfg["llm"]["roles"]["memory"]["model"]
        (bench,) = read_summary(sweep / job)["benchmarks"].values()
        summary = bench["methods"]["lazymem"]
        assert summary["errors"] == 0 and summary["windows"] > 0
    assert served == {"base": "bundled:smollm2-135m", "sft": "bundled:qwen2.5-0.5b"}
    report = tmp_path / "report"
    r = run_cli("task=report", f"report.inputs=[{sweep}]", f"hydra.run.dir={report}")
    assert r.returncode == 0, r.stderr[-3000:]
    table3 = (report / "table3_synthetic.csv").read_text().splitlines()
    assert [row.split(",")[0] for row in table3[1:]] == ["base", "sft"]
    assert "Gate Fmt." in (report / "report.md").read_text()
    assert (report / "accuracy_by_stage.png").stat().st_size > 0
