"""The strict format gate, the lenient salvage, the decoding schema and merging across sub-windows."""

from __future__ import annotations

import json

import pytest

from lazymem.construct.decisions import (
    ERROR_CODES,
    Decision,
    check_decisions,
    decision_schema,
    kept_content,
    merge_decisions,
    salvage_decisions,
)
from lazymem.construct.windows import Window

KEEP = {"op": "KEEP", "compressed_content": "User moved to Lisbon in May.", "reason": "answers the query"}
DROP = {"op": "DROP", "compressed_content": "", "reason": "small talk"}
VALID = json.dumps([KEEP, DROP])


def item(**changes):
    out = dict(KEEP)
    out.update(changes)
    return {k: v for k, v in out.items() if v is not ...}


def gate(value, n=2):
    text = value if isinstance(value, str) else json.dumps(value)
    return check_decisions(text, n)


# ---- the strict gate: valid outputs -----------------------------------------------------------


def test_valid_array_passes_with_decisions_in_order():
    result = gate(VALID)
    assert result.ok and result.error is None
    assert result.decisions == [
        Decision("KEEP", "User moved to Lisbon in May.", "answers the query"),
        Decision("DROP", "", "small talk"),
    ]


def test_surrounding_whitespace_and_pretty_printing_pass():
    assert gate("\n  " + json.dumps([KEEP, DROP], indent=2) + "\n\n").ok


def test_thinking_block_before_valid_array_passes():
    assert gate("<think>\nThe first message answers it.\n</think>\n\n" + VALID).ok
    assert gate("Reasoning without the opening tag.</think>" + VALID).ok  # template opened it
    assert gate("<think>\n\n</think>\n\n" + VALID).ok  # Qwen3 empty think block


def test_unicode_content_passes_and_is_preserved():
    text = json.dumps(
        [item(compressed_content="Usuário mora em São Paulo 🇧🇷 — 東京"), DROP], ensure_ascii=False
    )
    result = gate(text)
    assert result.ok and result.decisions[0].content == "Usuário mora em São Paulo 🇧🇷 — 東京"
    assert gate(json.dumps([item(compressed_content="日本"), DROP])).ok  # \u escapes too


def test_empty_reason_is_allowed():
    assert gate([item(reason=""), DROP]).ok


# ---- the strict gate: every failure has its code ----------------------------------------------


REJECTED = [
    ("", 2, "empty"),
    ("   \n", 2, "empty"),
    ("<think>all thought</think>\n", 2, "empty"),
    ("<think>thinking until the token limit", 2, "truncated"),
    ("```json\n" + VALID + "\n```", 2, "not_json"),
    ("Here are the decisions:\n" + VALID, 2, "not_json"),
    ("KEEP, DROP", 2, "not_json"),
    (VALID + "\nI kept the first message.", 2, "trailing_text"),
    (VALID + VALID, 2, "trailing_text"),
    (VALID[:-1], 2, "truncated"),
    (VALID[:40], 2, "truncated"),
    ('[{"op": "KEEP", "compressed_content": "User mo', 2, "truncated"),
    ("[", 2, "truncated"),
    (json.dumps(KEEP), 1, "not_array"),
    (json.dumps({"decisions": [KEEP, DROP]}), 2, "not_array"),
    ('"KEEP"', 1, "not_array"),
    (json.dumps([KEEP, DROP, DROP]), 2, "wrong_count"),
    (json.dumps([KEEP]), 2, "wrong_count"),
    ("[]", 2, "wrong_count"),
    (json.dumps([[KEEP, DROP]]), 2, "wrong_count"),
    (json.dumps([[KEEP], DROP]), 2, "not_object"),
    (json.dumps(["KEEP", "DROP"]), 2, "not_object"),
    (json.dumps([item(reason=...), DROP]), 2, "missing_field"),
    (json.dumps([item(compressed_content=...), DROP]), 2, "missing_field"),
    (json.dumps([item(op=...), DROP]), 2, "missing_field"),
    (json.dumps([item(index=0), DROP]), 2, "extra_field"),
    ('[{"op": "DROP", "op": "KEEP", "compressed_content": "x", "reason": ""}]', 1, "extra_field"),
    (json.dumps([item(op="keep"), DROP]), 2, "bad_op"),
    (json.dumps([item(op="Keep"), DROP]), 2, "bad_op"),
    (json.dumps([item(op="UPDATE"), DROP]), 2, "bad_op"),
    (json.dumps([item(op=" KEEP"), DROP]), 2, "bad_op"),
    (json.dumps([item(op=1), DROP]), 2, "bad_type"),
    (json.dumps([item(compressed_content=3), DROP]), 2, "bad_type"),
    (json.dumps([item(compressed_content=None), DROP]), 2, "bad_type"),
    (json.dumps([item(compressed_content=["a", "b"]), DROP]), 2, "bad_type"),
    (json.dumps([item(compressed_content={"text": "a"}), DROP]), 2, "bad_type"),
    (json.dumps([item(reason=None), DROP]), 2, "bad_type"),
    (json.dumps([KEEP, dict(DROP, compressed_content=None)]), 2, "bad_type"),
    (json.dumps([item(compressed_content=""), DROP]), 2, "empty_keep"),
    (json.dumps([item(compressed_content=" \n\t"), DROP]), 2, "empty_keep"),
    (json.dumps([KEEP, dict(DROP, compressed_content="small talk")]), 2, "nonempty_drop"),
    (json.dumps([KEEP, dict(DROP, compressed_content=" ")]), 2, "nonempty_drop"),
]


@pytest.mark.parametrize("text, n, code", REJECTED)
def test_gate_rejects_with_code(text, n, code):
    result = check_decisions(text, n)
    assert not result.ok
    assert result.decisions is None
    assert result.error == code
    assert code in ERROR_CODES


def test_detail_names_the_failing_item():
    result = gate([KEEP, dict(DROP, compressed_content="oops")])
    assert result.error == "nonempty_drop" and "item 1" in result.detail
    result = gate([KEEP, item(op="keep")])
    assert result.error == "bad_op" and "item 1" in result.detail and "'keep'" in result.detail
    assert "expected 2" in gate([KEEP]).detail


def test_every_error_code_is_exercised():
    assert {code for _, _, code in REJECTED} == set(ERROR_CODES)


# ---- salvage ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "text",
    [
        "```json\n" + VALID + "\n```",
        "```\n" + json.dumps([KEEP, DROP], indent=2) + "\n```\nDone.",
        "Here are the decisions:\n" + VALID,
        VALID + "\nI kept the first message.",
        "<think>hmm [not json] here</think>Sure! " + VALID,
        "See note [1]. " + VALID,
        json.dumps({"decisions": [KEEP, DROP]}),
        json.dumps([item(op="keep"), dict(DROP, op="Drop")]),
        json.dumps([KEEP, dict(DROP, compressed_content=None)]),
    ],
)
def test_salvage_recovers(text):
    assert not check_decisions(text, 2).ok
    result = salvage_decisions(text, 2)
    assert result.ok, result
    assert [d.op for d in result.decisions] == ["KEEP", "DROP"]
    assert result.decisions[1].content == ""


def test_salvage_returns_strict_result_for_valid_text():
    assert salvage_decisions(VALID, 2) == check_decisions(VALID, 2)


@pytest.mark.parametrize(
    "text, code",
    [
        ("```json\n" + VALID[:-3], "truncated"),
        (VALID[:-1], "truncated"),
        ("See [1]. " + VALID[:-2], "truncated"),  # an earlier small array is not taken instead
        ("<think>never closed [1]", "truncated"),
        ("no array at all", "not_json"),
        ("```json\n" + json.dumps([KEEP]) + "\n```", "wrong_count"),
        (json.dumps([item(compressed_content=None), DROP]), "bad_type"),  # null KEEP stays invalid
        (json.dumps([item(compressed_content=""), DROP]), "empty_keep"),
        (json.dumps([KEEP, dict(DROP, compressed_content="x")]), "nonempty_drop"),
    ],
)
def test_salvage_still_applies_strict_checks(text, code):
    result = salvage_decisions(text, 2)
    assert not result.ok and result.error == code


# ---- decision_schema ----------------------------------------------------------------------


def test_schema_shape():
    schema = decision_schema(3)
    assert schema["type"] == "array" and schema["minItems"] == schema["maxItems"] == 3
    items = schema["items"]
    assert items["additionalProperties"] is False
    assert set(items["required"]) == set(items["properties"]) == {"op", "compressed_content", "reason"}
    assert items["properties"]["op"]["enum"] == ["KEEP", "DROP"]
    with pytest.raises(ValueError):
        decision_schema(0)


def test_schema_agrees_with_gate_on_shape():
    jsonschema = pytest.importorskip("jsonschema")
    schema = decision_schema(2)
    jsonschema.validate(json.loads(VALID), schema)
    for bad in (
        [KEEP],
        [KEEP, DROP, DROP],
        [item(op="keep"), DROP],
        [item(index=1), DROP],
        [item(reason=...), DROP],
    ):
        with pytest.raises(jsonschema.ValidationError):
            jsonschema.validate(bad, schema)


# ---- merge_decisions ---------------------------------------------------------------------


def K(tag):
    return Decision("KEEP", tag, "")


def D():
    return Decision("DROP", "", "")


def test_merge_prefers_keep_then_earlier_window():
    w1 = Window(idx=(0, 1, 2), core=(1,), group=0, part=0)
    w2 = Window(idx=(2, 3, 4), core=(3,), group=0, part=1)
    w3 = Window(idx=(4, 5), core=(5,), group=0, part=2)
    merged = merge_decisions([w1, w2, w3], [[D(), K("a"), D()], [K("b"), D(), K("c")], [K("d"), K("e")]])
    assert merged[2] == K("b")  # KEEP beats an earlier DROP
    assert merged[4] == K("c")  # two KEEPs: the earlier window wins
    assert merged[1] == K("a") and merged[0] == D() and merged[5] == K("e")
    assert kept_content(merged) == {1: "a", 2: "b", 4: "c", 5: "e"}


def test_merge_two_drops_keep_the_earlier_reason():
    w1, w2 = Window(idx=(0, 1), core=(0,), group=0), Window(idx=(1, 2), core=(2,), group=0, part=1)
    merged = merge_decisions(
        [w1, w2], [[D(), Decision("DROP", "", "first")], [Decision("DROP", "", "second"), D()]]
    )
    assert merged[1].reason == "first"


def test_merge_skips_failed_windows():
    w1, w2 = Window(idx=(0, 1), core=(0,), group=0), Window(idx=(1, 2), core=(2,), group=0, part=1)
    merged = merge_decisions([w1, w2], [None, [K("x"), D()]])
    assert merged == {1: K("x"), 2: D()}
    assert merge_decisions([w1, w2], [None, None]) == {}


def test_merge_rejects_mismatched_lengths():
    w = Window(idx=(0, 1), core=(0,), group=0)
    with pytest.raises(ValueError):
        merge_decisions([w], [])
    with pytest.raises(ValueError):
        merge_decisions([w], [[K("x")]])


def test_raw_newline_in_a_string_fails_the_gate_but_is_salvaged():
    text = '[{"op": "KEEP", "compressed_content": "line one\nline two", "reason": "r"}]'
    assert check_decisions(text, 1).error == "not_json"
    salvaged = salvage_decisions(text, 1)
    assert salvaged.ok and salvaged.decisions[0].content == "line one\nline two"


def test_decision_array_ok_is_structure_only():
    from lazymem.construct.decisions import decision_array_ok

    two = '[{"op": "KEEP", "compressed_content": "", "reason": 1}, {"op": "DROP", "extra": true}]'
    assert decision_array_ok(two, 2)  # the strict gate would reject both items
    assert decision_array_ok("<think>hmm</think>\n" + two, 2)
    assert not decision_array_ok(two, 3)  # one decision per input message
    assert not decision_array_ok('[{"op": "MAYBE"}, {"op": "DROP"}]', 2)
    assert not decision_array_ok('{"op": "KEEP"}', 1) and not decision_array_ok("", 1)


ITEMS = [
    {"op": "KEEP", "compressed_content": "bike", "reason": "r"},
    {"op": "DROP", "compressed_content": "", "reason": "r"},
]
VALID_TWO = json.dumps(ITEMS)


@pytest.mark.parametrize(
    ("reply", "gate_fmt"),
    [
        (VALID_TWO, True),
        ("```json\n" + VALID_TWO + "\n```", True),  # fenced
        ("Here are my decisions:\n" + VALID_TWO, True),  # after a line of prose
        ("Decisions:\n```json\n" + VALID_TWO + "\n```\nDone.", True),  # prose, fence and a closing word
        ('{"decisions": ' + VALID_TWO + "}", True),  # inside a wrapper object: the reply contains it
        ("```json\n" + json.dumps(ITEMS[:1]) + "\n```", False),  # fenced, one decision short
        ("Here:\n" + json.dumps(ITEMS * 2), False),  # four decisions for two messages
        ("Here:\n" + VALID_TWO + "\nand a third: " + json.dumps([{"op": "DROP"}]), True),  # one array fits
        ("Here:\n" + VALID_TWO.replace("KEEP", "MAYBE"), False),  # not a decision
        ("<think>" + VALID_TWO + "</think>\nno array here", False),  # only the thinking holds one
        ("Here:\n" + VALID_TWO[:-2], False),  # cut off: not parseable
    ],
)
def test_gate_fmt_counts_a_reply_that_contains_the_array_the_strict_gate_the_whole_reply(reply, gate_fmt):
    """Table 3's Gate Fmt. (the paper: "outputs containing a parseable JSON decision array with exactly one
    decision per input message") against the strict gate of Eq. 6, which the RL reward and the curriculum's
    format rate use: only the bare array passes that one."""
    from lazymem.construct.decisions import decision_array_ok

    assert decision_array_ok(reply, 2) is gate_fmt
    assert check_decisions(reply, 2).ok is (reply == VALID_TWO)
