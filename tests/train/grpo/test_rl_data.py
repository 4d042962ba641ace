"""RL prompts (lazymem/train/grpo/rl_data.py): 50/50 balancing (gold with replacement, the rest without), the
prompt-length cut and VERL's row shape (task=build_rl end to end: tests/tasks/test_build_rl.py)."""

from __future__ import annotations

from lazymem.construct.windows import Window
from lazymem.data.schema import Message, Question
from lazymem.train.grpo import rl_data
from lazymem.train.grpo.rl_rows import read_ground_truth
from lazymem.train.sft_data import WindowItem


def item(k: int, gold: bool) -> WindowItem:
    q = Question(f"q{k}", "t", "what?", "ans", "h", gold_idx=(0,) if gold else ())
    msgs = (Message(0, "s", "2023/01/01", "user", "hi"), Message(1, "s", "2023/01/01", "assistant", "ok"))
    chat = [{"role": "system", "content": "sys"}, {"role": "user", "content": f"window {k}"}]
    return WindowItem(q, Window((0, 1), (0,), 0), chat, (gold, False), msgs)


def test_balance_pool_halves_with_and_without_replacement():
    pool = [item(k, gold=k < 2) for k in range(12)]
    out, info = rl_data.balance_pool(pool, 8, seed=0)
    assert len(out) == 8 and sum(any(it.gold) for it in out) == 4
    assert info["unique_gold_bearing"] <= 2  # only two gold windows: sampled with replacement
    non_gold = [id(it) for it in out if not any(it.gold)]
    assert len(set(non_gold)) == 4  # without replacement
    assert not info["short_of_nongold"]
    assert [it.question.id for it in out] == [it.question.id for it in rl_data.balance_pool(pool, 8, 0)[0]]


def test_balance_pool_short_of_non_gold_takes_all():
    pool = [item(k, gold=k < 5) for k in range(8)]
    out, info = rl_data.balance_pool(pool, 10, seed=1)
    assert info["short_of_nongold"] and info["non_gold"] == 3 and info["gold_bearing"] == 5
    assert len(out) == 8


def test_pair_pool_takes_every_gold_window_once_and_as_many_others():
    pool = [item(k, gold=k < 3) for k in range(10)]
    out, info = rl_data.pair_pool(pool, seed=0)
    gold = [it for it in out if any(it.gold)]
    assert len(out) == 6 and len(gold) == 3 and len({id(it) for it in out}) == 6  # no repeats
    assert info == {
        "size": 6,
        "gold_bearing": 3,
        "non_gold": 3,
        "short_of_nongold": False,
        "no_gold_windows": False,
    }
    assert [it.question.id for it in out] == [it.question.id for it in rl_data.pair_pool(pool, 0)[0]]
    short, info = rl_data.pair_pool([item(k, gold=k < 3) for k in range(4)], seed=0)
    assert len(short) == 4 and info["short_of_nongold"]


def test_cap_pool_keeps_half_gold_in_the_sets_order():
    pool, _ = rl_data.pair_pool([item(k, gold=k < 6) for k in range(14)], seed=0)
    out = rl_data.cap_pool(pool, 5)
    assert len(out) == 5 and sum(any(it.gold) for it in out) == 2
    assert [pool.index(it) for it in out] == sorted(pool.index(it) for it in out)
    # too few gold-bearing prompts: the rest of the cap goes to gold-free ones
    few = rl_data.cap_pool([item(k, gold=k < 1) for k in range(8)], 6)
    assert len(few) == 6 and sum(any(it.gold) for it in few) == 1
    assert rl_data.cap_pool(pool, 100) == pool


def test_windows_longer_than_verls_prompt_limit_are_left_out():
    short, long = item(0, True), item(1, False)
    long = WindowItem(long.question, long.window, [{"role": "user", "content": "word " * 500}], long.gold, ())
    kept, dropped = rl_data.fit_prompts([short, long], max_prompt_length=300)
    assert kept == [short] and dropped == 1
    assert rl_data.fit_prompts([short, long], max_prompt_length=8192) == ([short, long], 0)


def test_rows_are_verl_rows():
    rows = rl_data.rows(
        [item(0, True), item(1, False)], "train", {"q0": "t0", "q1": "t1"}, {"q0": "1. because"}
    )
    assert rows[0]["prompt"][1]["content"] == "window 0"
    truth = read_ground_truth(rows[0]["reward_model"]["ground_truth"])
    assert truth.gold == (True, False) and truth.query_time == "t0" and truth.answer == "ans"
    assert truth.reasoning == "1. because"  # the question's referenced reasoning chain
    assert read_ground_truth(rows[1]["reward_model"]["ground_truth"]).reasoning is None  # none written
    assert rows[1]["extra_info"] == {
        "split": "train",
        "index": 1,
        "question_id": "q1",
        "question_type": "t",
        "window_start": 0,
        "window_end": 1,
        "gold_bearing": False,
    }
