"""The ground truth of an RL row (lazymem/train/grpo/rl_rows.py), read back from its JSON or a decoded
dict."""

from __future__ import annotations

import json

import pytest

from lazymem.train.grpo.rl_rows import ground_truth_json, read_ground_truth


def test_ground_truth_formats():
    msgs = [{"role": "user", "content": f"message {i}", "timestamp": f"2023/05/0{i + 1}"} for i in range(2)]
    gt = ground_truth_json(
        query="Where did I go?", query_time="2023/06/01", messages=msgs, gold=[True, False], answer="Paris"
    )
    assert read_ground_truth(json.loads(gt)) == read_ground_truth(gt)  # a decoded dict works too
    bad = json.loads(gt)
    with pytest.raises(ValueError, match="gold"):
        read_ground_truth({**bad, "gold": [1, 0]})
    with pytest.raises(ValueError, match="messages"):
        read_ground_truth({**bad, "messages": bad["messages"][:1]})
