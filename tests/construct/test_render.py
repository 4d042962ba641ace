"""Rendering windows for the memory model and memory blocks for the answer model."""

from __future__ import annotations

import re

import pytest

from lazymem.construct.render import render_memory, render_raw, render_window, window_sections
from lazymem.construct.windows import Window, build_windows
from lazymem.data.schema import Message


def history(n: int) -> list[Message]:
    return [
        Message(
            idx=i,
            session_id=f"s{i // 4}",
            time=f"2023/05/{20 + i // 4:02d} (Sat) 10:{i:02d}",
            role="user" if i % 2 == 0 else "assistant",
            text=f"message {i}",
        )
        for i in range(n)
    ]


MESSAGES = history(12)


def test_window_sections_split_around_first_and_last_core():
    w = Window(idx=tuple(range(2, 10)), core=(4, 7), group=0)
    assert window_sections(w) == {
        "previous_bridge": (2, 3),
        "core_messages": (4, 5, 6, 7),  # the bridges between cores stay in the core section
        "next_bridge": (8, 9),
    }


def test_render_window_exact_text():
    w = Window(idx=(3, 4, 5, 6), core=(4, 5), group=0)
    assert render_window(w, MESSAGES) == (
        "previous_bridge:\n"
        "1. [2023/05/20 (Sat) 10:03] assistant: message 3\n"
        "\n"
        "core_messages:\n"
        "2. [2023/05/21 (Sat) 10:04] user: message 4\n"
        "3. [2023/05/21 (Sat) 10:05] assistant: message 5\n"
        "\n"
        "next_bridge:\n"
        "4. [2023/05/21 (Sat) 10:06] user: message 6"
    )


def test_render_window_marks_empty_sections():
    text = render_window(Window(idx=(0, 1), core=(0,), group=0), MESSAGES)
    assert text.startswith("previous_bridge:\n(none)\n\ncore_messages:\n1. ")
    assert text.endswith("next_bridge:\n2. [2023/05/20 (Sat) 10:01] assistant: message 1")


def test_window_without_core_goes_under_core_messages():
    w = Window(idx=(10, 11), core=(), group=0, part=1)
    assert window_sections(w)["core_messages"] == (10, 11)
    text = render_window(w, MESSAGES)
    assert text.count("(none)") == 2 and "1. " in text and "2. " in text


@pytest.mark.parametrize("retrieved", [[0], [5], [11], [0, 3, 11], list(range(12))])
def test_numbering_is_continuous_and_matches_window_length(retrieved):
    for w in build_windows(retrieved, len(MESSAGES), radius=2):
        text = render_window(w, MESSAGES)
        numbers = [int(n) for n in re.findall(r"^(\d+)\. ", text, flags=re.M)]
        assert numbers == list(range(1, len(w) + 1))
        texts = re.findall(r"message (\d+)$", text, flags=re.M)
        assert [int(t) for t in texts] == list(w.idx)  # chronological across the sections


def test_render_window_is_deterministic():
    w = build_windows([4, 6], len(MESSAGES), radius=2)[0]
    assert render_window(w, MESSAGES) == render_window(w, list(MESSAGES))


def test_render_window_needs_the_full_history():
    w = Window(idx=(3, 4), core=(3,), group=0)
    with pytest.raises(ValueError, match="full history"):
        render_window(w, MESSAGES[2:])
    with pytest.raises(ValueError, match="full history"):
        render_window(w, MESSAGES[:4])


def test_render_memory_is_chronological_and_skips_blank():
    kept = {7: "Moved to Lisbon.", 2: "  Has a dog named Rex. ", 5: "   "}
    assert render_memory(MESSAGES, kept) == (
        "[2023/05/20 (Sat) 10:02] user: Has a dog named Rex.\n"
        "[2023/05/21 (Sat) 10:07] assistant: Moved to Lisbon."
    )
    assert render_memory(MESSAGES, {}) == ""


def test_render_raw_keeps_multiline_text_and_sorts():
    a = Message(idx=1, session_id="s", time="t1", role="user", text="line one\nline two")
    b = Message(idx=0, session_id="s", time="t0", role="Caroline", text="Hi!")
    assert render_raw([a, b]) == "[t0] Caroline: Hi!\n[t1] user: line one\nline two"
    assert render_raw([]) == ""
