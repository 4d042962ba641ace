"""What one call may carry (lazymem/agent/inputs.py): text that is valid Unicode and within its bound, and
batches whose errors name the message's own position."""

from __future__ import annotations

import pytest

from lazymem.agent.inputs import BadInput, Limits, check_text

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
    batch = LIMITS.check_messages([{"role": "user", "text": "hi", "source": "f:1"}], now="2025-01-01")
    assert batch[0].time == "2025-01-01" and batch[0].session_id == "default" and batch[0].source == "f:1"
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
