"""Table 11 end to end (paper Appendix E.1): SFT-policy rollouts on the RL validation prompts, then the
reward-ordering diagnostic on them."""

import json

import pytest
from hydra import compose, initialize_config_dir

from lazymem.conf import CONF_DIR as CONF
from lazymem.llm.llm_set import role_config
from lazymem.tracking import outputs
from lazymem.train.grpo.diagnostics import load_jsonl, reward_ordering

from helpers import run_cli


def composed(*overrides):
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        return compose("config", overrides=list(overrides))


def test_paper_mode_samples_the_sft_policy_like_grpo():
    cfg = composed("+experiment=reward_rollouts", "llm.roles.memory.model=/ckpt/sft")
    assert cfg.task == "reward_rollouts"
    policy = role_config(cfg.llm, "memory")
    assert (policy["model"], policy["backend"], policy["served_name"]) == (
        "/ckpt/sft",
        "vllm",
        "lazymem-4b-sft",
    )
    assert (cfg.rollouts.n, cfg.rollouts.temperature, cfg.rollouts.top_p) == (8, 0.9, 0.95)
    assert cfg.rollouts.limit is None and cfg.diagnostics.eta == 0.915
    assert cfg.data.name == "longmemeval" and "reranker" in cfg.retrieval


def test_without_an_sft_checkpoint_it_stops_before_starting(tmp_path):
    r = run_cli("+experiment=reward_rollouts", f"hydra.run.dir={tmp_path}", env={"LAZYMEM_SFT_MODEL": None})
    assert r.returncode != 0 and "llm.roles.memory.model=" in r.stderr
    assert not (tmp_path / "rollouts.jsonl").exists()


@pytest.mark.slow
def test_rollouts_and_diagnostic_on_cpu_then_table11(tmp_path):
    run_dir = tmp_path / "run"
    env = {"LAZYMEM_CACHE": str(tmp_path / "cache")}
    out = run_cli(
        "+experiment=reward_rollouts_cpu", f"hydra.run.dir={run_dir}", env=env, timeout=900, standin=True
    )
    assert out.returncode == 0, out.stderr[-3000:]
    rollouts = load_jsonl(run_dir / "rollouts.jsonl")
    assert len(rollouts) == 4  # 2 prompts x 2 samples
    assert sorted((r["prompt_id"], r["sample"]) for r in rollouts) == [("0", 0), ("0", 1), ("1", 0), ("1", 1)]
    for r in rollouts:
        assert len(r["gold"]) >= 1 and r["error"] is None and r["response"]
    result = json.loads((run_dir / "reward_diagnostics.json").read_text())
    assert result["n_rollouts"] == 4 and result["n_prompts"] == 2
    assert result["rewards"] == reward_ordering(rollouts)["rewards"]  # the diagnostic ran on this very file
    logged = outputs.outputs_summary(run_dir)  # what W&B gets from the run directory
    assert logged["reward_diagnostics/n_rollouts"] == 4 and (run_dir / "table11_ours.csv").is_file()

    report = tmp_path / "report"
    r = run_cli("task=report", f"report.inputs=[{run_dir}]", f"hydra.run.dir={report}")
    assert r.returncode == 0, r.stderr[-3000:]
    md = (report / "report.md").read_text()
    assert "Table 11 (run)" in md and "(54.2)" in md
