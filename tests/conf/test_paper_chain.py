"""+experiment=paper_chain composes paper mode in every stage: the paper's models with each stage's memory
model, retrieval=paper_gpu and construct=paper, GRPO on VERL, the evaluations on the test split (LoCoMo
whole), the teacher's data from the training split; +experiment=chain_cpu is the same chain on the CPU's
models."""

from __future__ import annotations

from pathlib import Path

from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf

from lazymem.chain.fingerprint import composer
from lazymem.chain.stages import fill, output_paths, parse
from lazymem.conf import CONF_DIR
from lazymem.llm.llm_set import role_config

CHAIN = Path("/chains/c1")


def stage_configs(experiment: str, *overrides: str) -> dict:
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        cfg = compose("config", overrides=[f"+experiment={experiment}", *overrides])
    chain = OmegaConf.to_container(cfg.chain, resolve=True)
    stages = parse(chain["stages"], chain["cpus_per_stage"], chain["overrides"])
    outputs = output_paths(stages, CHAIN, {})
    with composer() as build:
        return {s.name: build(fill(s, outputs, CHAIN)) for s in stages}


def test_paper_chain_is_paper_mode_in_every_stage():
    cfgs = stage_configs("paper_chain", "data.path=/data/lme.json")
    assert [c.task for c in cfgs.values()] == [
        "split", "build_sft", "train_sft", "build_rl", "train_grpo", "merge_rl",
        *["evaluate"] * 6, "report",
    ]  # fmt: skip
    for name in ("eval_base", "eval_sft", "eval_rl", "locomo_base", "locomo_sft", "locomo_rl"):
        c = cfgs[name]
        assert c.data.split == "test" and not c.construct.structured and not c.construct.invalid.salvage, name
        assert c.retrieval.retrievers.dense.encoder.model.endswith("Qwen3-Embedding-8B"), name
        assert role_config(c.llm, "answer")["model"].endswith("Qwen3-32B")
        assert role_config(c.llm, "judge")["served_name"] == "deepseek-v4-pro"
    memory = {n: role_config(cfgs[f"eval_{n}"].llm, "memory")["model"] for n in ("base", "sft", "rl")}
    assert memory == {
        "base": "Qwen/Qwen3-4B",
        "sft": f"{CHAIN}/train_sft/model",
        "rl": f"{CHAIN}/merge_rl/model",
    }
    assert cfgs["eval_sft"].data.split_file == f"{CHAIN}/split/split.json"
    assert cfgs["locomo_rl"].data.name == "locomo"
    for name in ("build_sft", "build_rl"):
        c = cfgs[name]
        assert (
            c.llm.roles.teacher.served_name == "deepseek-v4-flash"
            and c.data.split_file == f"{CHAIN}/split/split.json"
        )
    assert cfgs["build_sft"].data.split == "train"
    grpo = cfgs["train_grpo"].train.grpo
    assert grpo.engine._target_.endswith("VerlEngine") and grpo.model == f"{CHAIN}/train_sft/model"
    assert (
        grpo.rl_data_dir == f"{CHAIN}/build_rl" and grpo.checkpoint_dir == f"{CHAIN}/train_grpo/checkpoints"
    )
    assert cfgs["merge_rl"].merge.checkpoint_dir == f"{CHAIN}/train_grpo/checkpoints"
    assert list(cfgs["report"].report.inputs) == [
        f"{CHAIN}/{s}" for s in ("eval_base", "eval_sft", "eval_rl", "locomo_base", "locomo_sft", "locomo_rl")
    ]


def test_chain_cpu_trains_with_trl_and_serves_each_stage_by_vllm():
    cfgs = stage_configs("chain_cpu")
    assert cfgs["train_grpo"].train.grpo.engine._target_.endswith("TrlEngine")
    assert cfgs["build_sft"].train.sft.model == f"{CHAIN}/base_model/model"
    for stage, model in (("base", "base_model/model"), ("sft", "train_sft/model"), ("rl", "merge_rl/model")):
        memory = role_config(cfgs[f"eval_{stage}"].llm, "memory")
        assert memory["backend"] == "vllm" and memory["model"] == f"{CHAIN}/{model}"
        assert cfgs[f"eval_{stage}"].data.split == "test"
    # the same windows everywhere: one message each (w = 0)
    assert {c.w for c in cfgs.values()} == {0}
