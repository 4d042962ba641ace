"""Reward-ordering diagnostic (paper Appendix E.1) on hand-made rollouts that mirror Table 11."""

from __future__ import annotations

import json

import pytest

from lazymem.train.grpo.diagnostics import conflict_pairs, group, main, outcome, reward_ordering

K, D = "KEEP", "DROP"


def rollout(prompt_id: str, gold: list[bool], ops: list[str]) -> dict:
    items = [{"op": op, "compressed_content": "c" if op == K else "", "reason": ""} for op in ops]
    return {"prompt_id": prompt_id, "gold": gold, "response": json.dumps(items)}


GOLD_A = [True, True, False, False, False, False]  # 2 gold, 4 non-gold
GOLD_B = [True, False, False, False]  # 1 gold, 3 non-gold
TABLE11_LIKE = [
    # A: keeps all gold but only half the non-gold is dropped, vs. drops one gold and all non-gold.
    # Micro prefers the second (4/6 < 5/6: an inversion), symmetric scores both 0.75 (a tie).
    rollout("A", GOLD_A, [K, K, D, D, K, K]),
    rollout("A", GOLD_A, [K, D, D, D, D, D]),
    {"prompt_id": "A", "gold": GOLD_A, "response": "[not json"},  # invalid: ignored
    # B: keeps the gold and drops 2 of 3 non-gold, vs. drops everything. Micro ties (3/4 each).
    rollout("B", GOLD_B, [K, D, D, K]),
    rollout("B", GOLD_B, [D, D, D, D]),
]


def test_mirrors_table11():
    result = reward_ordering(TABLE11_LIKE)
    micro, sym, ours = (result["rewards"][k] for k in ("micro", "symmetric", "ours"))
    assert result["n_conflict_pairs"] == 2 and result["n_valid"] == 4 and result["format_rate"] == 0.8
    # micro inverts or ties every conflict pair
    assert (micro["inversion"], micro["tie"]) == (0.5, 0.5)
    # symmetric removes the inversion but leaves a tie, which eta-weighting breaks
    assert (sym["inversion"], sym["tie"]) == (0.0, 0.5)
    assert (ours["inversion"], ours["tie"]) == (0.0, 0.0)
    # gold gap, hand-computed per prompt (best keep-all minus best gold-dropping), then averaged
    assert micro["gold_gap"] == pytest.approx(((4 / 6 - 5 / 6) + (3 / 4 - 3 / 4)) / 2)
    assert sym["gold_gap"] == pytest.approx((0.0 + (0.5 + 0.5 * 2 / 3 - 0.5)) / 2)
    ours_a = (0.915 + 0.085 * 0.5) - (0.915 * 0.5 + 0.085)
    ours_b = (0.915 + 0.085 * 2 / 3) - 0.085
    assert ours["gold_gap"] == pytest.approx((ours_a + ours_b) / 2)
    assert ours["gold_gap"] > sym["gold_gap"] > micro["gold_gap"]


def test_only_strict_opposite_moves_make_conflict_pairs():
    gold = GOLD_A
    both_better = outcome(rollout("A", gold, [K, K, D, D, D, D]))  # A_g 1, A_n 1
    half = outcome(rollout("A", gold, [K, K, D, D, K, K]))  # A_g 1, A_n 0.5: same A_g
    fewer_gold = outcome(rollout("A", gold, [K, D, D, D, D, D]))  # A_g 0.5, A_n 1: same A_n as both_better
    assert conflict_pairs([both_better, half, fewer_gold]) == [(half, fewer_gold)]


def test_gold_gap_counts_any_dropped_gold_as_dropping():
    records = [rollout("P", GOLD_A, [K, K, D, D, D, D]), rollout("P", GOLD_A, [K, D, D, D, D, D])]
    ours = reward_ordering(records)["rewards"]["ours"]
    assert ours["gold_gap"] == pytest.approx(1.0 - (0.915 * 0.5 + 0.085))
    assert ours["inversion"] is None  # no conflict pairs: rates undefined, not zero


def test_prompts_without_gold_or_without_both_kinds_do_not_count():
    records = [
        rollout("N", [False, False], [D, D]),
        rollout("N", [False, False], [K, D]),
        rollout("G", [True, False], [K, D]),
        rollout("G", [True, False], [K, K]),  # both keep the gold: no gold-dropping rollout
    ]
    result = reward_ordering(records)
    assert result["n_gap_prompts"] == 0 and result["rewards"]["ours"]["gold_gap"] is None


def test_rollouts_of_a_prompt_must_share_gold():
    with pytest.raises(ValueError, match="disagree"):
        group([rollout("A", [True, False], [K, D]), rollout("A", [False, True], [K, D])])


def test_cli_prints_the_table(tmp_path, capsys):
    path = tmp_path / "rollouts.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in TABLE11_LIKE) + "\n")
    main([str(path)])
    out = capsys.readouterr().out
    assert "micro" in out and "50.0%" in out and "2 conflict pairs" in out
    main([str(path), "--json"])
    assert json.loads(capsys.readouterr().out)["n_rollouts"] == 5
