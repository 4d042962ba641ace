"""Table 12 (paper Appendix E.1): the perturbed memories (lazymem/eval/perturbed_memories.py) and their
summary."""

import pytest

from lazymem.eval.perturbed_memories import summarize, variant_names, variants


def by_name(vs):
    out = {}
    for v in vs:
        out.setdefault(v.name, []).append(v.idx)
    return out


def test_every_variant_of_a_two_gold_question():
    vs = by_name(variants([4, 9], pool=[1, 2, 4, 5, 6, 7, 8], add=[1, 5], samples=3, seed="q"))
    assert vs["full_gold"] == [(4, 9)]
    assert vs["drop_one_gold"] == [(9,), (4,)]  # one deletion per gold message
    assert vs["drop_all_gold"] == [()]
    assert vs["add_all_nongold"] == [(1, 2, 4, 5, 6, 7, 8, 9)]  # gold in the pool is not added twice
    for k in (1, 5):
        draws = vs[f"add_{k}_nongold"]
        assert len(draws) == 3
        for idx in draws:
            assert list(idx) == sorted(idx) and {4, 9} <= set(idx)  # chronological, gold kept
            assert len(set(idx) - {4, 9}) == k and set(idx) - {4, 9} <= {1, 2, 5, 6, 7, 8}
    assert list(vs) == variant_names([1, 5])


def test_random_additions_are_reproducible_per_seed():
    one = variants([3], pool=range(40), add=[5], samples=3, seed="0:q1")
    assert one == variants([3], pool=range(40), add=[5], samples=3, seed="0:q1")
    assert one != variants([3], pool=range(40), add=[5], samples=3, seed="0:q2")


def test_an_addition_larger_than_the_pool_takes_it_once():
    vs = by_name(variants([3], pool=[1, 2, 3], add=[5], samples=3, seed="q"))
    assert vs["add_5_nongold"] == [(1, 2, 3)]


def _rec(qid, variant, correct, tokens=100, status="ok", sample=0):
    return {"qid": qid, "variant": variant, "method": f"{variant}/{sample}", "correct": correct,
            "input_tokens": tokens, "memory_tokens": tokens - 50, "status": status}  # fmt: skip


def test_summary_averages_within_question_then_pairs_with_full_gold():
    records = [
        _rec("a", "full_gold", True),
        _rec("b", "full_gold", True),
        _rec("c", "full_gold", False),
        # a: one of two deletions still answers; b: both fail; c: answered after losing a message
        _rec("a", "drop_one_gold", True, sample=0),
        _rec("a", "drop_one_gold", False, sample=1),
        _rec("b", "drop_one_gold", False, sample=0),
        _rec("b", "drop_one_gold", False, sample=1),
        _rec("c", "drop_one_gold", True, sample=0),
        _rec("a", "drop_all_gold", False, tokens=60),
        _rec("b", "drop_all_gold", None),  # unlabelled: not scored
        _rec("c", "drop_all_gold", False, status="error", tokens=60),
    ]
    s = summarize(records, ["full_gold", "drop_one_gold", "drop_all_gold"], resamples=500)
    full, drop1, drop_all = (s["variants"][k] for k in ("full_gold", "drop_one_gold", "drop_all_gold"))
    assert full["accuracy"] == pytest.approx(2 / 3) and full["delta"] is None and full["c_to_i"] is None
    assert drop1["accuracy"] == pytest.approx((0.5 + 0 + 1) / 3)
    assert drop1["delta"]["mean"] == pytest.approx((0.5 + 0 + 1) / 3 - 2 / 3)
    assert drop1["c_to_i"] == pytest.approx((0.5 + 1) / 2) and drop1["c_to_i_questions"] == 2
    assert drop_all["questions"] == 1 and drop_all["input_tokens"] == 60  # only a is scored
    assert drop_all["delta"]["mean"] == -1
    assert (s["errors"], s["unjudged"], s["questions"]) == (1, 1, 3)


def test_the_all_non_gold_row_counts_the_memories_that_did_not_fit_the_context():
    """+all non-gold averages about 30k tokens (paper: 30,385): the memories past the answer model's context
    fail before the call. The row is scored on the questions that fit, and says how many did not."""
    too_long = "answer model call failed: context exceeded: a prompt of about {} tokens plus max_tokens 8192"
    records = [_rec(q, "full_gold", True) for q in "abcd"]
    records += [
        _rec("a", "add_all_nongold", True, tokens=20000),
        _rec("b", "add_all_nongold", False, tokens=25000),
    ]
    records += [
        _rec(q, "add_all_nongold", None, tokens=t, status="error") | {"error": too_long.format(t)}
        for q, t in (("c", 34512), ("d", 41007))
    ]
    s = summarize(records, ["full_gold", "add_all_nongold"], resamples=200)
    row = s["variants"]["add_all_nongold"]
    assert (row["questions"], row["accuracy"], row["errors"], row["dropped"]) == (2, 0.5, 2, 2)
    assert row["error_messages"] == {too_long.format("N").replace("8192", "N"): 2}
    assert s["variants"]["full_gold"]["errors"] == 0
