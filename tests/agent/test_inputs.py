"""What one call may carry (lazymem/agent/inputs.py): text that is valid Unicode and within its bound, and
batches whose errors name the message's own position."""

from __future__ import annotations

import pytest

from lazymem.agent.inputs import (
    IMPORT_FIELDS,
    BadInput,
    Limits,
    check_key,
    check_message_ids,
    check_text,
    request_digest,
)

LIMITS = Limits(max_messages_per_add=3, max_text_chars=10, max_id_chars=12)


@pytest.mark.parametrize(
    ("value", "reason"),
    [
        (None, "must be a non-empty string"),
        ("   ", "must be a non-empty string"),
        ("x" * 11, "is longer than 10 characters"),
        ("ab\ud800", "is not valid text: a lone surrogate or NUL at position 2"),
        ("\udfffab", "at position 0"),
        ("a\x00b", "at position 1"),
    ],
)
def test_text_that_no_store_can_hold_is_refused_without_quoting_it(value, reason):
    with pytest.raises(BadInput, match=reason) as err:
        check_text("text", value, 10)
    assert "\ud800" not in str(err.value) and "\x00" not in str(err.value)


def test_a_paired_surrogate_is_ordinary_text():
    check_text("text", "smile 😀", 10)  # one code point in Python: no surrogate at all


def test_a_batch_gets_defaults_and_its_errors_name_the_position_in_the_import():
    one = [{"role": "user", "text": "hi", "source": "f:1", "aliases": ["old:1"]}]
    batch = LIMITS.check_messages(one, now="2025-01-01", allowed=IMPORT_FIELDS)
    assert batch[0].time == "2025-01-01" and batch[0].session_id == "default" and batch[0].source == "f:1"
    assert batch[0].aliases == ("old:1",)
    with pytest.raises(BadInput, match=r"message 0: unknown fields \['aliases', 'source'\]"):
        LIMITS.check_messages(one[:1], now="2025-01-01")  # an add carries no source
    with pytest.raises(BadInput, match=r"line 9: unknown fields \['mood'\]"):
        LIMITS.check_messages(
            [{"role": "u", "text": "x", "mood": 1}], "now", 8, name=lambda n: f"line {n + 1}"
        )
    with pytest.raises(BadInput, match="message 0: time must be a non-empty string"):
        LIMITS.check_messages([{"role": "u", "text": "x", "time": ""}], "now")
    with pytest.raises(BadInput, match="message 7: text is longer than 10"):
        LIMITS.check_messages(
            [{"role": "user", "text": "ok"}, {"role": "user", "text": "x" * 11}], "now", first=6
        )
    with pytest.raises(BadInput, match="message 0: role is longer than 12"):
        LIMITS.check_messages([{"role": "the narrator of it", "text": "ok"}], "now")
    with pytest.raises(BadInput, match="at most 3 messages per add, got 4"):
        LIMITS.check_messages([{"role": "u", "text": "x"}] * 4, "now")
    for bad in ("text", {"role": "u", "text": "x"}, []):
        with pytest.raises(BadInput, match="messages must be a non-empty list"):
            LIMITS.check_messages(bad, "now")


def test_ids_are_checked_like_text():
    LIMITS.check_ids("acme", "ann")
    with pytest.raises(BadInput, match="user_id is not valid text"):
        LIMITS.check_ids("acme", "a\ud800")
    with pytest.raises(BadInput, match="tenant is longer than 12"):
        LIMITS.check_ids("acme-corporation", "ann")


@pytest.mark.parametrize("ids", ["12", b"12", {1: 2}, 7, None, [True], [1.0], ["1"], [0], [2**63], [1, "2"]])
def test_ids_are_integers_and_nothing_is_converted(ids):
    with pytest.raises(BadInput):
        check_message_ids(ids)


def test_any_iterable_of_ids_is_read_once():
    assert check_message_ids(i for i in (3, 1)) == [3, 1]
    assert check_message_ids(range(2, 4)) == [2, 3] and check_message_ids(()) == []
    with pytest.raises(BadInput, match="forget_all"):
        check_message_ids(None)


def test_keys_are_printable_ascii_and_digests_ignore_defaults_filled_in_later():
    assert check_key("idempotency_key", None, 20) is None and check_key("k", "abc-1", 20) == "abc-1"
    for bad in ("a b", "é", "x" * 21, "", 5):
        with pytest.raises(BadInput):
            check_key("k", bad, 20)
    same = request_digest([{"role": "u", "text": "x"}])
    assert same == request_digest([{"role": "u", "text": "x", "time": None}])
    assert same != request_digest([{"role": "u", "text": "y"}])
