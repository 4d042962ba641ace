"""Oracle session: the evidence sessions verbatim and in order; not applicable to LoCoMo."""

from __future__ import annotations

import asyncio

import pytest

from lazymem.construct.render import render_raw
from lazymem.methods.base import Context
from lazymem.methods.oracle_session import NotApplicable, OracleSession

from helpers import ask, make_history

SMALL = make_history(
    [
        ("s1", "2023/01/01", ["hello", "hi there", "bye"]),
        ("s2", "2023/01/05", ["I adopted a dog", "congrats"]),
        ("s3", "2023/02/01", ["tax forms", "due in April"]),
        ("s4", "2023/03/01", ["named her Biscuit", "lovely"]),
    ]
)


class DatasetContext(Context):
    def __init__(self, dataset_name):
        super().__init__()
        self.dataset_name = dataset_name


def test_oracle_session_gives_exactly_the_evidence_sessions_in_order():
    q = ask(gold_sessions=("s4", "s2"), gold_idx=(3, 7))
    memory = asyncio.run(OracleSession().build(q, SMALL, DatasetContext("longmemeval")))
    expected = [m for m in SMALL.messages if m.session_id in {"s2", "s4"}]
    assert memory.shown == [3, 4, 7, 8]
    assert memory.text == render_raw(expected)
    assert memory.style == "raw"
    assert memory.detail["oracle_sessions"] == ["s2", "s4"]  # chronological, not as listed


def test_oracle_session_falls_back_to_the_sessions_of_gold_messages():
    memory = asyncio.run(OracleSession().build(ask(gold_idx=(5,)), SMALL, Context()))
    assert memory.shown == [5, 6]


def test_oracle_session_is_not_applicable_to_locomo():
    q = ask(gold_sessions=("s2",))
    with pytest.raises(NotApplicable, match="locomo"):
        asyncio.run(OracleSession().build(q, SMALL, DatasetContext("locomo")))
    assert asyncio.run(OracleSession().build(q, SMALL, DatasetContext("synthetic"))).shown == [3, 4]
