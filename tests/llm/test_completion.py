"""What a chat call gives back (lazymem/llm/completion.py): a Qwen3-style thinking block split from the
final text."""

from __future__ import annotations

import pytest

from lazymem.llm.completion import split_thinking


@pytest.mark.parametrize(
    "text, expected",
    [
        ("<think>a b</think>\n[1]", ("a b", "[1]")),
        ("a b</think>[1]", ("a b", "[1]")),
        ("</think>\n\n[1]", ("", "[1]")),
        ("<think>a b", ("a b", "")),
        ("  [1]  ", ("", "[1]")),
        ("<think>\n</think>", ("", "")),
    ],
)
def test_split_thinking(text, expected):
    assert split_thinking(text) == expected
