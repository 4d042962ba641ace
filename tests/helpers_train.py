"""Training inputs without a model: the SFT data folder build_sft writes (from an oracle teacher), and the
GRPO and reward settings as task=train_grpo passes them, with VERL's own trainer config to compose them into.
"""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import yaml
from omegaconf import OmegaConf

from lazymem.conf import CONF_DIR
from lazymem.construct.decisions import Decision
from lazymem.construct.processor import InvalidPolicy, MemoryProcessor
from lazymem.data.synthetic import load as synthetic
from lazymem.prompts import load as load_prompt
from lazymem.train import sft_data as sd
from lazymem.train.sft_config import DS_Z2, sft_yaml


def write_sft_dir(out: Path, model: str, n_questions: int = 6, n_val: int = 0) -> Path:
    """What build_sft writes, from synthetic questions annotated by their gold labels (an oracle teacher):
    gold messages KEEP with their text, the rest DROP; windows balanced as build_sft does. `n_val` more
    questions make the validation set that chooses the epoch."""
    ds = synthetic()
    system, user = load_prompt("memory_system"), load_prompt("memory_user")
    processor = MemoryProcessor(None, system, user, InvalidPolicy())

    class GoldPlusNeighbours:  # stands in for retrieval: the gold messages and the first two of the history
        def search(self, history, text):
            q = next(q for q in ds.questions if q.text == text)
            return SimpleNamespace(indices=sorted({*q.gold_idx, 0, 1}))

    def records(questions):
        items = sd.window_items(ds, questions, GoldPlusNeighbours(), processor, 1, 8, 7)
        annotations = [
            sd.Annotation(
                it,
                [
                    Decision("KEEP", m.text, "evidence") if g else Decision("DROP", "", "unrelated")
                    for g, m in zip(it.gold, it.messages, strict=True)
                ],
                "",
            )
            for it in items
        ]
        return [sd.sharegpt_record(a) for a in sd.balance(annotations, seed=0)[0]]

    with_gold = [q for q in ds.questions if q.gold_idx]
    out.mkdir(parents=True, exist_ok=True)
    (out / f"{sd.DATASET_NAME}.json").write_text(json.dumps(records(with_gold[:n_questions])))
    names = [sd.DATASET_NAME]
    if n_val:
        val = with_gold[n_questions : n_questions + n_val]
        (out / f"{sd.VAL_DATASET_NAME}.json").write_text(json.dumps(records(val)))
        names.append(sd.VAL_DATASET_NAME)
    (out / "dataset_info.json").write_text(json.dumps(sd.dataset_info(*names)))
    (out / "ds_z2_config.json").write_text(json.dumps(DS_Z2))
    options = yaml.safe_load((CONF_DIR / "train" / "sft.yaml").read_text())
    options.update(model=model, output_dir=str(out / "sft_model"), radius=1)
    eval_dataset = sd.VAL_DATASET_NAME if n_val else None
    train = sft_yaml(options, out, out / "ds_z2_config.json", False, eval_dataset)
    (out / "sft.yaml").write_text(yaml.safe_dump(train))
    return out


GRPO = CONF_DIR / "train" / "grpo.yaml"


REWARD = CONF_DIR / "train" / "reward.yaml"


def grpo_cfg(tmp_path, **changes) -> dict:
    cfg = OmegaConf.load(GRPO)
    cfg.merge_with({"w": 2, "seed": 0})  # the root keys it interpolates (radius, data and rollout seeds)
    g = OmegaConf.to_container(cfg, resolve=True)
    g.pop("w"), g.pop("seed")
    g.update({"rl_data_dir": str(tmp_path), "model": "/models/sft", **changes})
    return g


# a reward_judge role config as the train task passes it (nested blocks, lists, nulls, quoted strings)
JUDGE_LLM = {
    "backend": "endpoint",
    "base_url": "http://127.0.0.1:8000/v1",
    "served_name": "qwen3-32b",
    "dialect": "vllm",
    "decoding": {"temperature": 0.0, "thinking": True, "thinking_budget": 512, "seed": None},
    "extra_body": {},
    "vllm": {"reasoning_config": {"reasoning_end_str": "</think>"}, "extra_args": ["--n", "2"]},
}


def reward_cfg(tmp_path) -> dict:
    r = OmegaConf.load(REWARD)
    r.curriculum.state_path = str(tmp_path / "state.json")
    out = OmegaConf.to_container(r, resolve=True)
    out["judge"] |= {"llm": JUDGE_LLM, "cache_path": str(tmp_path / "judge.sqlite")}
    return out


def compose_verl(ovr: list[str]):
    """VERL's ppo_trainer config composed with the overrides `ovr`."""
    import verl.trainer.config as verl_config
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    GlobalHydra.instance().clear()
    with initialize_config_dir(str(Path(verl_config.__file__).parent), version_base=None):
        return hydra_compose("ppo_trainer", overrides=ovr)
