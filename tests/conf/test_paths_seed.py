"""The root `seed` reaches every seeded component but the paper's fixed seeds; the `paths` group places
the caches and run directories."""

from __future__ import annotations

import json
import re

import pytest
import yaml
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf

from lazymem.conf import CONF_DIR

from helpers import run_cli


def root(*overrides):
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base=None):
        return compose(config_name="config", overrides=list(overrides))


def seeded_keys(cfg):
    """Every seed the root seed should set, by dotted key."""
    keys = [
        "data.loader.seed",
        "llm.common.decoding.seed",
        "train.grpo.data.seed",
        "train.grpo.paper_verl_defaults.rollout_seed",
        "train.sft.seed",
    ]
    if cfg.llm.get("vllm") is not None:
        keys.append("llm.vllm.seed")
    return {k: OmegaConf.select(cfg, k) for k in keys}


@pytest.mark.parametrize("llm", ["cpu", "paper"])
def test_the_root_seed_reaches_every_seeded_component(llm):
    overrides = [f"llm={llm}", "+train/grpo@train.grpo=verl", "+train@train.sft=sft"]
    default, changed = root(*overrides), root(*overrides, "seed=7")
    assert default.seed == 0 and set(seeded_keys(default).values()) == {0}
    assert set(seeded_keys(changed).values()) == {7}
    # the paper's fixed seeds stay: its data split (App. D.1) and VERL's FSDP/dataloader seeds (D.3)
    assert changed.data.split_seed == 42
    assert changed.train.grpo.fsdp_seed == 42 and changed.train.grpo.data_loader_seed == 42


def test_perturbation_draws_follow_the_root_seed():
    assert root("+experiment=perturbation", "seed=3").perturbation.seed == 3


def test_a_run_records_its_seed_and_the_data_changes_with_it(tmp_path):
    stats = {}
    for seed in (0, 1):
        out = run_cli("task=stats", f"seed={seed}", f"hydra.run.dir={tmp_path}/s{seed}")
        assert out.returncode == 0, out.stderr
        config = yaml.safe_load((tmp_path / f"s{seed}" / "config.yaml").read_text())
        assert config["seed"] == seed and config["llm"]["common"]["decoding"]["seed"] == seed
        stats[seed] = json.loads((tmp_path / f"s{seed}" / "stats.json").read_text())
    assert stats[0]["source"] != stats[1]["source"]
    assert stats[0]["tokens_per_history"] != stats[1]["tokens_per_history"]


def test_paths_cache_places_every_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("LAZYMEM_CACHE", str(tmp_path / "env"))
    monkeypatch.delenv("LAZYMEM_MODEL_CACHE", raising=False)  # the tests' shared model cache
    assert root().paths.cache == str(tmp_path / "env")
    cfg = root(f"paths.cache={tmp_path}/c")
    c = f"{tmp_path}/c"
    assert cfg.llm.cache_path == f"{c}/llm.sqlite" and cfg.llm.model_cache_dir == f"{c}/models"
    assert cfg.retrieval.retrievers.dense.cache.dir == f"{c}/embeddings"
    assert cfg.cache.dir == c
    monkeypatch.setenv("LAZYMEM_MODEL_CACHE", str(tmp_path / "models"))  # the bundled models elsewhere
    cfg = root(f"paths.cache={tmp_path}/c")
    assert cfg.llm.model_cache_dir == str(tmp_path / "models") and cfg.llm.cache_path == f"{c}/llm.sqlite"


def test_no_config_spells_the_cache_folder_but_the_paths_group():
    spelled = [
        str(p.relative_to(CONF_DIR))
        for p in CONF_DIR.rglob("*.yaml")
        if re.search(r"oc\.env:LAZYMEM_CACHE\b|\bcache_dir\b", p.read_text())
    ]
    assert spelled == ["paths/default.yaml"]


def test_paths_outputs_places_run_directories(tmp_path):
    out = run_cli("task=stats", env={"LAZYMEM_OUTPUTS": str(tmp_path / "out")})
    assert out.returncode == 0, out.stderr
    (run_dir,) = (tmp_path / "out" / "runs").glob("*/*_stats_*")
    assert (run_dir / "stats.json").exists()
