"""Full history: the most recent messages that fit the token budget, verbatim."""

from __future__ import annotations

import asyncio

import pytest

from lazymem.construct.render import render_raw
from lazymem.methods.base import Context
from lazymem.methods.full_history import FullHistory
from lazymem.tokens import count_tokens

from helpers import ask, make_history

LONG = make_history(
    [
        (f"s{k}", f"2023/01/{k + 1:02d}", [f"message {k}-{j}: " + "word " * (5 + 3 * j) for j in range(4)])
        for k in range(6)
    ]
)


@pytest.mark.parametrize("budget", [40, 150, 400])
def test_full_history_keeps_the_most_recent_messages_within_budget(budget):
    memory = asyncio.run(FullHistory(budget_tokens=budget).build(ask(), LONG, Context()))
    n = len(memory.shown)
    assert 0 < n < len(LONG.messages)
    assert memory.shown == [m.idx for m in LONG.messages[-n:]]  # a contiguous tail
    assert count_tokens(memory.text) <= budget
    one_more = render_raw(LONG.messages[-n - 1 :])
    assert count_tokens(one_more) > budget  # the next older message would not have fit
    assert memory.detail["history_kept"] == n
    assert memory.detail["history_dropped"] == len(LONG.messages) - n


def test_full_history_budget_below_the_last_message_gives_an_empty_block():
    last = count_tokens(render_raw(LONG.messages[-1:]))
    memory = asyncio.run(FullHistory(budget_tokens=last - 1).build(ask(), LONG, Context()))
    assert (memory.text, memory.shown, memory.detail["history_kept"]) == ("", [], 0)


def test_full_history_large_budget_keeps_everything():
    memory = asyncio.run(FullHistory(budget_tokens=10**6).build(ask(), LONG, Context()))
    assert memory.text == render_raw(LONG.messages)
    assert memory.detail["history_dropped"] == 0
