"""Tables 5/6 (paper Appendix B): NanoMemory retrieval depth x constructor model, a sweep with -m."""

import csv
import json

import pytest
from hydra import compose, initialize_config_dir

from lazymem.conf import CONF_DIR as CONF
from lazymem.eval.summary import read_summary

from helpers import run_cli


def composed(experiment, *overrides):
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        return compose(
            "config", overrides=[f"+experiment={experiment}", *overrides], return_hydra_config=True
        )


def test_table5_sweeps_depth_and_constructor_in_paper_mode():
    cfg = composed("nanomemory_depth")
    assert cfg.task == "evaluate" and cfg.method._target_.endswith("NanoMemory")
    assert (cfg.data.name, cfg.data.split) == ("longmemeval", "test")
    assert cfg.hydra.sweeper.params["method.top_sessions"] == "3,5,10"
    assert cfg.hydra.sweeper.params.constructor == "qwen3_32b,qwen3_4b"
    assert "reranker" in cfg.retrieval and cfg.llm.roles.judge.served_name == "deepseek-v4-pro"
    assert (cfg.latency.warmup, cfg.latency.repeats, cfg.llm.cache) == (3, 3, False)
    roles = {}
    for constructor in ("qwen3_32b", "qwen3_4b"):
        job = composed("nanomemory_depth", f"constructor={constructor}", "method.top_sessions=5")
        role = job.method.role
        assert job.method.top_sessions == 5 and job.llm.roles[role].concurrency == 1
        roles[constructor] = job.llm.roles[role].get("served_name", job.llm.common.served_name)
    assert roles == {"qwen3_32b": "qwen3-32b", "qwen3_4b": "qwen3-4b"}


def test_table6_is_locomo_with_deeper_retrieval_and_no_timing():
    cfg = composed("nanomemory_depth_locomo")
    assert cfg.data.name == "locomo" and cfg.data.loader.conversations == [-2, -1]
    assert cfg.hydra.sweeper.params["method.top_sessions"] == "3,5,10,15,20,25,30"
    assert cfg.hydra.sweeper.params.constructor == "qwen3_32b,qwen3_4b"
    assert cfg.latency.repeats == 1


@pytest.mark.slow
def test_depth_sweep_on_cpu_and_table5(tmp_path):
    sweep = tmp_path / "sweep"
    out = run_cli(
        "-m",
        "+experiment=nanomemory_depth_cpu",
        # two jobs keep it short on 2 cores: both depths with the small constructor (the role mapping of
        # both constructors is checked above)
        "method.top_sessions=1,3",
        "constructor=qwen3_4b",
        "data.limit=1",
        "llm.common.decoding.max_tokens=64",
        f"hydra.sweep.dir={sweep}",
        env={"LAZYMEM_CACHE": str(tmp_path / "cache")},
        timeout=900,
        standin=True,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    tokens = {}
    for job in sorted(p for p in sweep.iterdir() if p.is_dir()):
        (bench,) = read_summary(job)["benchmarks"].values()
        summary = bench["methods"]["nanomemory"]
        assert summary["errors"] == 0 and summary["latency_s"]["processing"]["n"] == 1
        records = [json.loads(line) for line in (job / "records.jsonl").read_text().splitlines()]
        tokens[job.name] = records[0]["detail"]["session_tokens"]
    assert len(tokens) == 2

    report = tmp_path / "report"
    r = run_cli("task=report", f"report.inputs=[{sweep}]", f"hydra.run.dir={report}")
    assert r.returncode == 0, r.stderr[-3000:]
    with open(report / "table56_synthetic.csv") as f:
        rows = list(csv.DictReader(f))
    assert [(row["top-k"], row["constructor"]) for row in rows] == [("1", "qwen3_4b"), ("3", "qwen3_4b")]
    assert {row["model"] for row in rows} == {"bundled:smollm2-135m"}
    tok = {row["top-k"]: float(row["Tok."]) for row in rows}
    assert tok["3"] > tok["1"] > 0  # deeper retrieval passes more tokens to the constructor
    assert all(float(row["filter mean"]) > 0 for row in rows)
