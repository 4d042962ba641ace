"""The training experiments compose the paper's setup by default, and their *_cpu variants the bundled
models: teacher role, retrieval, data, and the settings that make each stage the paper's."""

from __future__ import annotations

import pytest
from hydra import compose, initialize_config_dir
from hydra.core.global_hydra import GlobalHydra
from omegaconf import OmegaConf

from lazymem.conf import CONF_DIR
from lazymem.llm.llm_set import role_config


def experiment(name: str, *overrides: str):
    GlobalHydra.instance().clear()
    with initialize_config_dir(str(CONF_DIR), version_base=None):
        return compose("config", overrides=[f"+experiment={name}", *overrides])


@pytest.mark.parametrize("name", ["build_sft", "build_rl"])
def test_training_data_uses_the_papers_teacher_retrieval_and_data(name):
    cfg = experiment(name)
    teacher = role_config(OmegaConf.to_container(cfg.llm, resolve=True), "teacher")
    assert (teacher["backend"], teacher["served_name"]) == ("endpoint", "deepseek-v4-flash")
    assert teacher["api_key_env"] == "DEEPSEEK_API_KEY"
    assert cfg.data.name == "longmemeval"
    retrieval = OmegaConf.to_yaml(cfg.retrieval)  # unresolved: the env-var defaults name the models
    assert "Qwen/Qwen3-Embedding-8B" in retrieval and "BAAI/bge-reranker-v2-m3" in retrieval
    assert cfg.retrieval.n == 50


def test_paper_training_settings(monkeypatch):
    monkeypatch.delenv("LAZYMEM_SFT_MODEL", raising=False)
    sft = experiment("build_sft").train.sft
    assert (sft.n_questions, sft.val_questions, sft.balance, sft.with_reasoning) == (100, 40, True, True)
    rl = experiment("build_rl").train.grpo.data
    assert (rl.size, rl.balance_val, rl.reasoning_chains) == (10000, True, True)
    grpo = experiment("train_grpo").train.grpo
    assert grpo.model is None  # no base-model fallback: the SFT checkpoint must be given
    assert (grpo.fsdp_seed, grpo.data_loader_seed, grpo.ref_param_offload, grpo.ref_torch_compile) == (
        42,
        42,
        True,
        False,
    )


@pytest.mark.parametrize("name", ["build_sft_cpu", "build_rl_cpu"])
def test_cpu_variants_use_the_bundled_models(name):
    cfg = experiment(name)
    teacher = role_config(OmegaConf.to_container(cfg.llm, resolve=True), "teacher")
    assert teacher["backend"] == "llamacpp" and teacher["model"].startswith("bundled:")
    assert cfg.data.name == "synthetic"
