"""Every experiment in conf/experiment/ composes, and the paper experiments compose the paper's protocol.

Paper experiments (every file not named `*_cpu`, except the quickstart) must select the paper's models,
retrieval and construction, and evaluate on the split the paper uses; the CPU variants select the bundled
models. A default that drifts back to a CPU stand-in fails here.
"""

from __future__ import annotations

import os

import pytest
from hydra import compose, initialize_config_dir
from hydra.core.global_hydra import GlobalHydra
from omegaconf import OmegaConf

from lazymem.conf import CONF_DIR as CONF
from lazymem.llm.llm_set import role_config

from helpers import MAIN_TABLE_METHODS

EXPERIMENTS = sorted(p.stem for p in (CONF / "experiment").glob("*.yaml"))
# paper mode on tiny models through vLLM's CPU build: neither a paper experiment nor a bundled-model one
REHEARSALS = ["rehearsal_cpu"]
# CPU mode without the suffix: the quick start, and chain_mini (the chain on SmolLM2-135M)
UNSUFFIXED_CPU = ("quickstart", "chain_mini")
CPU = [e for e in EXPERIMENTS if (e.endswith("_cpu") or e in UNSUFFIXED_CPU) and e not in REHEARSALS]
PAPER = [e for e in EXPERIMENTS if e not in CPU and e not in REHEARSALS]
# experiments whose job reads LongMemEval questions, and the split the paper uses for it
SPLITS = {
    "main_table": ("benchmarks.longmemeval.split", "test"),
    "radius_ablation": ("data.split", "test"),
    "stage_ablation": ("data.split", "test"),
    "coverage_longmemeval": ("data.split", "test"),
    "build_sft": ("data.split", "train"),
}


# tasks that never run the memory model at query time, so `construct` does not apply
NO_MEMORY_INFERENCE = {
    "coverage",
    "build_sft",
    "build_rl",
    "train_sft",
    "train_grpo",
    "merge_rl",
    "reward_diagnostics",
}


def composed(experiment: str, *overrides: str):
    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        return compose(
            "config", overrides=[f"+experiment={experiment}", *overrides], return_hydra_config=True
        )


def resolved(cfg) -> dict:
    plain = OmegaConf.to_container(cfg, resolve=False)
    plain.pop("hydra")
    return OmegaConf.to_container(OmegaConf.create(plain), resolve=True)


def bundled_models(node, path="") -> list[str]:
    """Keys holding a bundled CPU model (`fallback_gguf` is the documented no-GPU fallback: allowed)."""
    found = []
    if isinstance(node, dict):
        for k, v in node.items():
            if k != "fallback_gguf":
                found += bundled_models(v, f"{path}.{k}" if path else str(k))
    elif isinstance(node, list):
        for i, v in enumerate(node):
            found += bundled_models(v, f"{path}[{i}]")
    elif isinstance(node, str) and node.startswith("bundled:"):
        found.append(path)
    return found


def test_there_are_paper_and_cpu_experiments():
    assert {"main_table", "stage_ablation", "radius_ablation", "coverage_locomo"} <= set(PAPER)
    assert {"main_table_cpu", "stage_ablation_cpu", "radius_ablation_cpu", "quickstart"} <= set(CPU)


@pytest.mark.parametrize("experiment", PAPER)
def test_paper_experiments_compose_the_paper_setup(experiment):
    cfg = composed(experiment)
    choices = cfg.hydra.runtime.choices
    assert choices["llm"] in ("paper", "paper_4b"), f"{experiment} composes llm={choices['llm']}"
    assert choices["retrieval"] == "paper_gpu", f"{experiment} composes retrieval={choices['retrieval']}"
    assert bundled_models(resolved(cfg)) == [], f"{experiment} composes a bundled CPU model"
    if cfg.task not in NO_MEMORY_INFERENCE:
        assert choices["construct"] == "paper", f"{experiment} composes construct={choices['construct']}"
        assert cfg.construct.structured is False and cfg.construct.invalid.fallback == "none"
    assert (
        cfg.llm.roles.judge.served_name == "deepseek-v4-pro" and cfg.llm.roles.judge.decoding.temperature == 0
    )
    if experiment in SPLITS:
        key, split = SPLITS[experiment]
        assert OmegaConf.select(cfg, key) == split


@pytest.mark.parametrize("experiment", CPU)
def test_cpu_experiments_compose_the_bundled_models(experiment):
    cfg = composed(experiment)
    assert cfg.hydra.runtime.choices["llm"] == "cpu"
    assert cfg.llm.common.model.startswith("bundled:")
    assert cfg.hydra.runtime.choices["retrieval"] != "paper_gpu"


def test_the_rehearsal_is_main_tables_paper_mode_with_models_data_and_sizes_changed():
    cfg, paper = composed("rehearsal_cpu"), composed("main_table")
    choices = cfg.hydra.runtime.choices
    assert (choices["llm"], choices["construct"], choices["placement"]) == ("paper", "paper", "none")
    assert set(cfg.methods) == MAIN_TABLE_METHODS and OmegaConf.to_container(cfg.methods, resolve=False) == (
        OmegaConf.to_container(paper.methods, resolve=False)
    )
    assert cfg.benchmarks.locomo is None and cfg.benchmarks.longmemeval.name == "synthetic"
    plain = resolved(cfg)
    assert bundled_models(plain) == []
    for role in ("answer", "memory", "memory_small"):
        rc = role_config(plain["llm"], role)
        assert rc["backend"] == "vllm" and rc["vllm"]["device"] == "cpu"
        # the paper's server flags and decoding, except the sizes
        for key in ("reasoning_parser", "reasoning_config", "enable_prefix_caching", "seed"):
            assert rc["vllm"][key] == role_config(resolved(paper)["llm"], role)["vllm"][key], key
        assert rc["decoding"]["thinking"] is True and rc["decoding"]["temperature"] == 0.6
    port = role_config(plain["llm"], "answer")["vllm"]["port"]
    for role, name in (("judge", "deepseek-v4-pro"), ("teacher", "deepseek-v4-flash")):
        rc = role_config(plain["llm"], role)
        assert (rc["backend"], rc["dialect"], rc["served_name"]) == ("endpoint", "deepseek", name)
        assert rc["base_url"] == f"http://127.0.0.1:{port}/v1" and rc["api_key_env"] is None
        assert name in role_config(plain["llm"], "answer")["vllm"]["served_names"]
    assert role_config(plain["llm"], "memory_small")["vllm"]["port"] is None
    assert plain["retrieval"]["reranker"]["_target_"] == paper.retrieval.reranker._target_


def test_main_table_defines_the_papers_protocol():
    cfg = composed("main_table")
    assert set(cfg.methods) == MAIN_TABLE_METHODS  # Table 1's rows that run here
    assert list(cfg.benchmarks.locomo.loader.conversations) == [-2, -1]
    assert list(cfg.benchmarks.locomo.loader.categories) == [1, 2, 3, 4]
    assert (cfg.latency.warmup, cfg.latency.repeats, cfg.llm.cache) == (3, 3, False)
    assert cfg.retrieval.parallel is True and cfg.retrieval.n == 50
    answer = cfg.llm.roles.answer
    assert "Qwen3-32B" in str(cfg.llm.common.model) and cfg.llm.common.decoding.thinking is True
    assert answer == {} or "model" not in answer  # the answer role is Qwen3-32B from `common`
    assert cfg.prompts.answer_compressed == "answer_compressed"  # the paper's layout: query first
    # each benchmark names its own judge; LongMemEval's official budget is 10 tokens at temperature 0
    lme, locomo = cfg.benchmarks.longmemeval.judge, cfg.benchmarks.locomo.judge
    assert (lme.style, locomo.style) == ("longmemeval", "locomo")
    assert (lme.prompt, locomo.prompt) == ("judge_longmemeval", "judge_locomo")
    assert lme.max_tokens == 10 and lme.official_src is None and locomo.max_tokens is None


def test_ablations_sweep_the_papers_grid_with_the_4b_model():
    radius = composed("radius_ablation")
    assert radius.hydra.sweeper.params.w == "0,1,2,3"
    assert "4B" in str(radius.llm.roles.memory.model) or "4b" in str(radius.llm.roles.memory.served_name)
    stage = composed("stage_ablation", "stages.sft=/ckpt/sft")
    assert stage.hydra.sweeper.params.stage == "base,sft,rl"
    assert stage.llm.roles.memory.model == os.environ.get("LAZYMEM_QWEN3_4B", "Qwen/Qwen3-4B")
    assert (
        composed("stage_ablation", "stage=sft", "stages.sft=/ckpt/sft").llm.roles.memory.model == "/ckpt/sft"
    )
