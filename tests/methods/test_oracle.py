"""lazymem.methods.oracle: OracleTurn shows exactly the gold evidence messages, verbatim as
`[time] role: text` lines in chronological order, and nothing when a question has no evidence."""

import asyncio

import pytest

from lazymem.data.schema import History, Message, Question
from lazymem.methods.base import Context, Method
from lazymem.methods.oracle import OracleTurn

HISTORY = History(
    "h1",
    [
        Message(0, "s1", "2023/05/01 (Mon) 09:00", "user", "I adopted a dog last weekend."),
        Message(1, "s1", "2023/05/01 (Mon) 09:00", "assistant", "Congratulations!"),
        Message(2, "s2", "2023/05/03 (Wed) 18:30", "user", "My tax forms are due.", gold=True),
        Message(3, "s2", "2023/05/03 (Wed) 18:30", "assistant", "File them early."),
        Message(4, "s3", "2023/05/07 (Sun) 11:15", "user", "I named her Biscuit.\nShe is tiny.", gold=True),
        Message(5, "s3", "2023/05/07 (Sun) 11:15", "assistant", "Biscuit is a sweet name."),
    ],
)


def question(gold_idx=(), **kw):
    return Question(
        id="q1",
        type="single-session-user",
        text="What did I name my dog?",
        answer="Biscuit",
        history_id="h1",
        gold_idx=gold_idx,
        **kw,
    )


def build(q, method=None):
    return asyncio.run((method or OracleTurn()).build(q, HISTORY, Context()))


def test_oracle_turn_shows_the_gold_messages_verbatim_in_chronological_order():
    memory = build(question(gold_idx=(4, 0, 5)))  # listed out of order
    assert memory.shown == [0, 4, 5]
    assert memory.text == (
        "[2023/05/01 (Mon) 09:00] user: I adopted a dog last weekend.\n"
        "[2023/05/07 (Sun) 11:15] user: I named her Biscuit.\nShe is tiny.\n"
        "[2023/05/07 (Sun) 11:15] assistant: Biscuit is a sweet name."
    )
    assert memory.style == "raw"  # the answer model reads it as verbatim messages


def test_oracle_turn_follows_the_questions_gold_not_the_messages_flags():
    memory = build(question(gold_idx=(1,)))  # messages 2 and 4 carry gold=True for other questions
    assert memory.shown == [1]
    assert memory.text == "[2023/05/01 (Mon) 09:00] assistant: Congratulations!"


def test_oracle_turn_without_evidence_gives_an_empty_block():
    memory = build(question(abstention=True))
    assert memory.text == "" and memory.shown == []


def test_oracle_turn_records_no_retrieval_or_memory_model_work():
    memory = build(question(gold_idx=(2,)))
    assert memory.timings == {} and memory.retrieved == [] and memory.scores == []
    assert memory.windows == [] and memory.decided == [] and memory.compressed == {}


def test_oracle_turn_is_a_method_needing_no_retrieval_and_no_llm_role():
    method = OracleTurn()
    assert isinstance(method, Method)
    assert method.name == "oracle_turn" and method.roles == () and method.needs_retrieval is False
    renamed = OracleTurn(name="oracle_turn_b")
    assert renamed.name == "oracle_turn_b"
    assert build(question(gold_idx=(2,)), renamed).shown == [2]


def test_evidence_outside_the_history_names_the_question_and_positions():
    with pytest.raises(
        ValueError, match=r"question q1: evidence positions \[6, 9\] are outside its history h1 of 6"
    ):
        build(question(gold_idx=(9, 2, 6)))
