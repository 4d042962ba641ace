"""Training inputs without a model: the SFT data folder build_sft writes (from an oracle teacher), and the
GRPO and reward settings as task=train_grpo passes them, with VERL's own trainer config to compose them into.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from types import SimpleNamespace

import yaml
from hydra import compose, initialize_config_dir
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


# parameters Qwen3-4B's config.json makes (model_memory.param_count): the checkpoints' disk-space tests
QWEN3_4B = 4_022_272_000

GRPO = CONF_DIR / "train" / "grpo" / "verl.yaml"
GRPO_COMMON = CONF_DIR / "train" / "grpo" / "_common.yaml"
GRPO_TRL = CONF_DIR / "train" / "grpo" / "trl.yaml"


REWARD = CONF_DIR / "train" / "reward.yaml"


def grpo_cfg(tmp_path, engine: Path = GRPO, **changes) -> dict:
    """train.grpo as an engine's file composes it (_common.yaml, then the engine's own keys)."""
    own = OmegaConf.load(engine)
    own.pop("defaults")
    cfg = OmegaConf.merge(OmegaConf.load(GRPO_COMMON), own)
    root = OmegaConf.create({"w": 2, "seed": 0, "g": cfg})  # the root keys it interpolates (radius, seeds)
    g = OmegaConf.to_container(root, resolve=True)["g"]
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


def compose_train_grpo(tmp_path: Path, *overrides: str):
    """+experiment=train_grpo as the CLI composes it, reading build_rl's rows from `tmp_path` and writing
    its checkpoints under it, without tracking."""
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        return compose(
            "config",
            overrides=[
                "+experiment=train_grpo",
                f"train.grpo.rl_data_dir={tmp_path}",
                f"train.grpo.checkpoint_dir={tmp_path / 'ckpt'}",
                "logger=none",
                *overrides,
            ],
        )


def compose_verl(ovr: list[str]):
    """VERL's ppo_trainer config composed with the overrides `ovr`."""
    import verl.trainer.config as verl_config
    from hydra.core.global_hydra import GlobalHydra

    GlobalHydra.instance().clear()
    with initialize_config_dir(str(Path(verl_config.__file__).parent), version_base=None):
        return compose("ppo_trainer", overrides=ovr)


def format_taught_qwen3(out: Path, steps: int = 45, seed: int = 0, both_ops: bool = False) -> Path:
    """A tiny random Qwen3 (scripts/tiny_qwen3.py) taught by plain-torch SFT to answer one-message windows
    with a valid decision array, and build_rl-style train/val parquet rows of such windows (gold on even
    rows). 45 steps at lr 3e-3 leave it valid about 70% of the time at temperature 0.9: GRPO groups then
    hold valid and invalid rollouts. `both_ops`: every prompt is taught both a KEEP and a DROP reply, so the
    model answers either about half the time, and every row is gold (only KEEP earns a reward). Returns the
    SFT model's directory; the rows are in `out`."""
    import subprocess
    import sys

    import pyarrow as pa
    import pyarrow.parquet as pq
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from lazymem.train.grpo.rl_rows import rl_row

    script = Path(__file__).parents[1] / "scripts" / "tiny_qwen3.py"
    subprocess.run([sys.executable, str(script), str(out / "base"), "--hidden", "64"], check=True)

    def row(i: int, split: str) -> dict:
        window = [{"role": "user", "content": f"m{i}", "timestamp": ""}]
        prompt = [{"role": "user", "content": f"m{i}"}]
        return rl_row(
            prompt=prompt, query="q", query_time=None, messages=window, gold=[both_ops or i % 2 == 0],
            answer="a", split=split, index=i,
        )  # fmt: skip

    for split, n in (("train", 8), ("val", 4)):
        pq.write_table(pa.Table.from_pylist([row(i, split) for i in range(n)]), out / f"{split}.parquet")
    tok = AutoTokenizer.from_pretrained(out / "base")
    model = AutoModelForCausalLM.from_pretrained(out / "base")
    keep = json.dumps([{"op": "KEEP", "compressed_content": "m", "reason": "r"}]) + tok.eos_token
    drop = json.dumps([{"op": "DROP", "compressed_content": "", "reason": "r"}]) + tok.eos_token
    pairs = []
    for i in range(8):
        chat = tok.apply_chat_template([{"role": "user", "content": f"m{i}"}], add_generation_prompt=True)
        chat = chat["input_ids"] if isinstance(chat, Mapping) else chat
        for target in (keep, drop) if both_ops else (keep,):
            pairs.append((list(chat), tok(target, add_special_tokens=False)["input_ids"]))
    width = max(len(p) + len(t) for p, t in pairs)
    ids = torch.tensor([p + t + [tok.pad_token_id] * (width - len(p) - len(t)) for p, t in pairs])
    labels = torch.tensor([[-100] * len(p) + t + [-100] * (width - len(p) - len(t)) for p, t in pairs])
    mask = torch.tensor([[1] * (len(p) + len(t)) + [0] * (width - len(p) - len(t)) for p, t in pairs])
    torch.manual_seed(seed)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
    for _ in range(steps):
        model(input_ids=ids, attention_mask=mask, labels=labels).loss.backward()
        opt.step()
        opt.zero_grad()
    model.save_pretrained(out / "sft")
    tok.save_pretrained(out / "sft")
    return out / "sft"


def trl_train(data: Path, model: Path, checkpoint_dir: Path, **changes) -> Path:
    """GRPO on TRL in this process, as task=train_grpo's subprocess runs it (trl/config.trl_config, then
    trl/run.train), on a tiny CPU setting: 2 prompts x 8 rollouts per batch, one prompt per optimiser step,
    fp32, full fine-tune, no weight decay, no curriculum. Returns the checkpoint directory."""
    from lazymem.train.grpo.trl import run
    from lazymem.train.grpo.trl.config import trl_config

    settings = {
        "rl_data_dir": str(data), "model": str(model), "checkpoint_dir": str(checkpoint_dir),
        "n_gpus_per_node": 0, "train_batch_size": 2, "ppo_mini_batch_size": 1, "rollout_n": 8,
        "per_device_train_batch_size": 8, "per_device_eval_batch_size": 8, "max_response_length": 40,
        "lr": 3e-4, "weight_decay": 0.0, "total_epochs": 10, "test_freq": 100, "save_freq": 100,
        "val_before_train": False, "min_free_gib": 0, "bf16": False, "gradient_checkpointing": False,
        "use_vllm": False, "curriculum": False, "max_steps": 16,
    }  # fmt: skip
    g = grpo_cfg(data, engine=GRPO_TRL, **{**settings, **changes})
    g["lora"]["enabled"] = False
    run.train(trl_config(g, reward_cfg(data)))
    return Path(checkpoint_dir)


def rollout(kept: list[str], lam: float = 0.5) -> dict:
    """Our reward's dict for a rollout that keeps every message of its window, with these texts (an empty
    list: an invalid output)."""
    from lazymem.train.grpo.reward import compute_score
    from lazymem.train.grpo.rl_rows import ground_truth_json

    msgs = [{"role": "user", "content": f"m{i}", "timestamp": "2023/05/01"} for i in range(max(len(kept), 1))]
    gt = ground_truth_json(
        query="q?", query_time="2023/06/01", messages=msgs, gold=[True] * len(msgs), answer="a"
    )
    items = [{"op": "KEEP", "compressed_content": c, "reason": "r"} for c in kept]
    return compute_score("lazymem", json.dumps(items) if kept else "[", gt, lam=lam)


def sampled_reward(model: Path, rows: Path, n: int = 32, seed: int = 123) -> list[float]:
    """The reward (phase 1) of `n` replies sampled as the rollouts are (T 0.9, top-p 0.95) to every prompt
    of the parquet file `rows`: a policy's expected reward, measured apart from training."""
    import pyarrow.parquet as pq
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from lazymem.train.grpo.reward import compute_score

    tok, policy = AutoTokenizer.from_pretrained(model), AutoModelForCausalLM.from_pretrained(model)
    torch.manual_seed(seed)
    scores = []
    for row in pq.read_table(rows).to_pylist():
        chat = tok.apply_chat_template(
            list(row["prompt"]), add_generation_prompt=True, return_tensors="pt", return_dict=True
        )
        out = policy.generate(
            **chat, do_sample=True, temperature=0.9, top_p=0.95, top_k=0, max_new_tokens=40,
            num_return_sequences=n, pad_token_id=tok.pad_token_id,
        )  # fmt: skip
        for ids in out[:, chat["input_ids"].shape[1] :]:
            text = tok.decode(ids, skip_special_tokens=True)
            truth = row["reward_model"]["ground_truth"]
            scores.append(compute_score(row["data_source"], text, truth, lam=0.0)["score"])
    return scores
