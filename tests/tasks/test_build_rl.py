"""task=build_rl: the validation set's size, and end to end on the CPU (slow): VERL's parquet rows, half of
them gold-bearing."""

from __future__ import annotations

import json

import pytest
from omegaconf import OmegaConf

from lazymem.construct.windows import Window
from lazymem.data.schema import Message, Question
from lazymem.tasks.build_rl import val_set
from lazymem.train.grpo.rl_rows import read_ground_truth
from lazymem.train.sft_data import WindowItem

from helpers import run_cli


def window(k: int, gold: bool) -> WindowItem:
    q = Question(f"q{k}", "t", "what?", "ans", "h", gold_idx=(0,) if gold else ())
    msg = Message(0, "s", "2023/01/01", "user", "hi")
    return WindowItem(q, Window((0,), (0,), 0), [{"role": "user", "content": f"w{k}"}], (gold,), (msg,))


@pytest.mark.parametrize("balance", [True, False])
def test_val_size_caps_the_validation_set_keeping_half_gold(balance):
    pool = [window(k, gold=k < 10) for k in range(30)]
    opts = OmegaConf.create({"balance_val": balance, "seed": 0, "val_size": None})
    full, _ = val_set(pool, opts)
    assert len(full) == (20 if balance else 30)
    opts.val_size = 8
    capped, info = val_set(pool, opts)
    assert len(capped) == 8 and sum(any(it.gold) for it in capped) == 4 and info["capped_to"] == 8
    assert set(map(id, capped)) <= set(map(id, full))


@pytest.mark.slow
def test_build_rl_end_to_end(tmp_path):
    pq = pytest.importorskip("pyarrow.parquet")
    proc = run_cli(
        "+experiment=build_rl_cpu",
        "retrieval.n=5",
        # no model: the chains have their own tests (tests/train/grpo/test_reasoning_chain.py)
        "train.grpo.data.reasoning_chains=false",
        f"hydra.run.dir={tmp_path}",
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    stats = json.loads((tmp_path / "rl_stats.json").read_text())
    train = pq.read_table(tmp_path / "train.parquet").to_pylist()
    assert len(train) == stats["train"]["rows"] == 20 and stats["train"]["too_long"] == 0
    gold = [any(read_ground_truth(r["reward_model"]["ground_truth"]).gold) for r in train]
    assert sum(gold) == 10 and all(r["extra_info"]["split"] == "train" for r in train)
    assert sum(r["extra_info"]["gold_bearing"] for r in train) == 10
    val = pq.read_table(tmp_path / "val.parquet").to_pylist()
    val_gold = sum(r["extra_info"]["gold_bearing"] for r in val)
    # the validation questions' gold-bearing windows, each once, and as many gold-free ones
    assert len(val) == stats["val"]["rows"] == 2 * val_gold == 2 * stats["val"]["pool"]["gold_bearing"] > 0
    assert stats["val"]["balanced"]["gold_bearing"] == val_gold and stats["val"]["pool"]["questions"] >= 1
    for name, rows in (("train", train), ("val", val)):
        assert stats[name]["reasoning_chains"]["off"]
        assert all(read_ground_truth(r["reward_model"]["ground_truth"]).reasoning is None for r in rows)
    assert train[0]["prompt"][0]["role"] == "system" and train[0]["prompt"][1]["role"] == "user"
