"""Our reward and RL rows through VERL 0.9.1's own code: its reward loader and manager, its validation
metrics, and its RLHFDataset reading our parquet rows. A tiny byte-level tokenizer is built in the test
(no model download)."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import numpy as np
import pytest

pytestmark = pytest.mark.slow

torch = pytest.importorskip("torch")
pytest.importorskip("verl")

from omegaconf import OmegaConf  # noqa: E402
from verl import DataProto  # noqa: E402
from verl.trainer.ppo.metric_utils import process_validation_metrics  # noqa: E402
from verl.trainer.ppo.reward import load_reward_manager  # noqa: E402
from verl.utils.dataset.rl_dataset import RLHFDataset, collate_fn  # noqa: E402

import lazymem.train.grpo.reward as reward_mod  # noqa: E402
from lazymem.train.grpo.reward import compute_score  # noqa: E402
from lazymem.train.grpo.rl_rows import ground_truth_json, read_ground_truth, rl_row  # noqa: E402

K, D = "KEEP", "DROP"
CHAT_TEMPLATE = (
    "{% for m in messages %}<{{ m['role'] }}>{{ m['content'] }}\n{% endfor %}"
    "{% if add_generation_prompt %}<assistant>{% endif %}"
)


@pytest.fixture(scope="module")
def tokenizer():
    """A byte-level BPE tokenizer (exact decode of any text) with a chat template, built offline."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=300,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        special_tokens=["<pad>", "<eos>"],
    )
    tok.train_from_iterator(['[{"op": "KEEP", "compressed_content": "x", "reason": ""}]'], trainer)
    hf = PreTrainedTokenizerFast(tokenizer_object=tok, pad_token="<pad>", eos_token="<eos>")
    hf.chat_template = CHAT_TEMPLATE
    return hf


def messages(n: int) -> list[dict]:
    return [{"role": "user", "content": f"message {i}", "timestamp": "2023/05/01"} for i in range(n)]


def response(ops: list[str]) -> str:
    return json.dumps([{"op": op, "compressed_content": "c" if op == K else "", "reason": ""} for op in ops])


# (uid, gold, response text): two prompts, two rollouts each
ROLLOUTS = [
    ("p1", [True, False, False], "<think>\nok</think>\n" + response([K, D, D])),
    ("p1", [True, False, False], "oops"),
    ("p2", [False, False], response([D, D])),
    ("p2", [False, False], response([K, D])),
]


def batch(tokenizer) -> DataProto:
    """A DataProto shaped like the rollout output the reward loop receives (left-padded prompts)."""
    pad = tokenizer.pad_token_id
    prompts = [tokenizer.encode("<user>window\n<assistant>", add_special_tokens=False)] * len(ROLLOUTS)
    replies = [tokenizer.encode(text, add_special_tokens=False) for _, _, text in ROLLOUTS]
    p_len, r_len = max(map(len, prompts)), max(map(len, replies))
    prompt_ids = torch.tensor([[pad] * (p_len - len(p)) + p for p in prompts])
    response_ids = torch.tensor([r + [pad] * (r_len - len(r)) for r in replies])
    mask = torch.tensor(
        [
            [0] * (p_len - len(p)) + [1] * len(p) + [1] * len(r) + [0] * (r_len - len(r))
            for p, r in zip(prompts, replies, strict=True)
        ]
    )
    truths = [
        ground_truth_json(query="q", query_time="t", messages=messages(len(g)), gold=g, answer="a")
        for _, g, _ in ROLLOUTS
    ]
    return DataProto.from_dict(
        tensors={
            "prompts": prompt_ids,
            "responses": response_ids,
            "input_ids": torch.cat([prompt_ids, response_ids], dim=1),
            "attention_mask": mask,
        },
        non_tensors={
            "data_source": np.array(["lazymem"] * len(ROLLOUTS), dtype=object),
            "reward_model": np.array([{"style": "rule", "ground_truth": t} for t in truths], dtype=object),
            "extra_info": np.array(
                [{"split": "val", "index": i} for i in range(len(ROLLOUTS))], dtype=object
            ),
            "uid": np.array([uid for uid, _, _ in ROLLOUTS], dtype=object),
        },
    )


def reward_config(path: str, name: str) -> OmegaConf:
    return OmegaConf.create(
        {
            "reward": {
                "custom_reward_function": {"path": path, "name": name, "reward_kwargs": {"eta": 0.915}},
                "reward_manager": {"source": "register", "name": "naive", "module": None},
            }
        }
    )


@pytest.mark.parametrize(
    ("path", "name", "is_async"),
    [
        ("pkg://lazymem.train.grpo.reward", "compute_score", False),
        ("pkg://lazymem.train.grpo.reward", "compute_score_async", True),
        (reward_mod.__file__, "compute_score_async", True),
    ],
)
def test_verl_loads_and_runs_our_reward(tokenizer, monkeypatch, path, name, is_async):
    monkeypatch.delenv("LAZYMEM_CURRICULUM_STATE", raising=False)
    manager = load_reward_manager(reward_config(path, name), tokenizer)
    assert manager.is_async_reward_score is is_async
    data = batch(tokenizer)

    async def score_all():  # as VERL's RewardLoopWorker.compute_score_batch does
        return await asyncio.gather(*(manager.run_single(data[i : i + 1]) for i in range(len(data))))

    outs = manager.loop.run_until_complete(score_all())
    assert [o["reward_score"] for o in outs] == pytest.approx([1.0, 0.0, 1.0, 0.5])
    infos = [o["reward_extra_info"] for o in outs]
    assert infos[1]["gate_error"] == "not_json" and infos[0]["a_gold"] == 1.0 and infos[2]["a_gold"] is None
    rm_scores = manager.assemble_rm_scores(data, [o["reward_score"] for o in outs])
    assert rm_scores.sum(dim=1).tolist() == pytest.approx([1.0, 0.0, 1.0, 0.5])

    # VERL's reward loop stacks each key across rollouts, then its validation metrics average them
    keys = list(infos[0])
    stacked = {k: np.array([info[k] for info in infos]) for k in keys}
    metrics = process_validation_metrics(
        ["lazymem"] * len(outs),
        [uid for uid, _, _ in ROLLOUTS],
        {"reward": [o["reward_score"] for o in outs], **{k: v.tolist() for k, v in stacked.items()}},
    )["lazymem"]
    # one name per metric: every prompt contributes a mean over all its rollouts ...
    assert all(
        set(m) == {"mean@2", "std@2", "best@2/mean", "best@2/std", "worst@2/mean", "worst@2/std"}
        for m in metrics.values()
    )
    # ... except where the category is absent: only the gold-bearing prompt p1 has a_gold (1.0 and the
    # invalid rollout's 0.0)
    assert metrics["a_gold"]["mean@2"] == pytest.approx(0.5)
    assert metrics["a_nongold"]["mean@2"] == pytest.approx(((1.0 + 0.0) / 2 + (1.0 + 0.5) / 2) / 2)
    assert metrics["format_ok"]["mean@2"] == pytest.approx((0.5 + 1.0) / 2)
    assert "gate_error" not in metrics and "r_qual" not in metrics  # strings and all-None are skipped


def test_rlhf_dataset_reads_our_rows(tokenizer, tmp_path):
    import datasets

    rows = []
    for i, (gold, answer) in enumerate([([True, False], "Paris"), ([False, False, False], "none")]):
        msgs = messages(len(gold))
        prompt = [
            {"role": "system", "content": "You build memory."},
            {"role": "user", "content": f"window {i}"},
        ]
        rows.append(
            rl_row(
                prompt=prompt,
                query="Where?",
                query_time="2023/06/01",
                messages=msgs,
                gold=gold,
                answer=answer,
                reasoning="chain" if i == 0 else None,
                split="train",
                index=i,
            )
        )
    path = tmp_path / "train.parquet"
    datasets.Dataset.from_list(rows).to_parquet(str(path))
    config = OmegaConf.create(
        {
            "prompt_key": "prompt",
            "max_prompt_length": 512,
            "filter_overlong_prompts": True,
            "filter_overlong_prompts_workers": 1,
            "cache_dir": str(tmp_path / "cache"),
        }
    )
    ds = RLHFDataset(str(path), tokenizer, config)
    assert len(ds) == len(rows)  # nothing filtered: the chat template applied to every row
    item = ds[0]
    assert item["raw_prompt"] == rows[0]["prompt"] and item["data_source"] == "lazymem"
    assert item["extra_info"]["split"] == "train" and item["index"] == 0
    truth = read_ground_truth(item["reward_model"]["ground_truth"])
    assert truth.gold == (True, False) and truth.reasoning == "chain" and truth.messages[0]["timestamp"]
    assert read_ground_truth(ds[1]["reward_model"]["ground_truth"]).reasoning is None
    collated = collate_fn([ds[0], ds[1]])
    assert len(collated["reward_model"]) == 2
    out = compute_score("lazymem", response([K, D]), item["reward_model"]["ground_truth"], item["extra_info"])
    assert out["score"] == 1.0
    assert Path(path).stat().st_size > 0
