import pytest

from lazymem.data.schema import Question
from lazymem.eval.judge import JudgePrompts, parse_label, style_for


def question(**kw):
    base = dict(
        id="q", type="temporal-reasoning", text="How many days ago?", answer="19 days", history_id="h"
    )
    return Question(**(base | kw))


@pytest.mark.parametrize(
    ("text", "label"),
    [
        ("yes", True),
        ("Yes.", True),
        ("no", False),
        ("NO, the reply is wrong", False),
        ("<think>maybe yes? no wait</think>\nno", False),
        ("<think>hmm</think> Yes", True),
        ("The answer is correct.", None),
        ("", None),
    ],
)
def test_longmemeval_labels(text, label):
    assert parse_label("longmemeval", text) is label


@pytest.mark.parametrize(
    ("text", "label"),
    [
        ("CORRECT", True),
        ('{"label": "CORRECT"}', True),
        ("WRONG", False),
        ("Incorrect.", False),
        ("<think>is it correct?</think>WRONG", False),
        ("yes", None),
    ],
)
def test_locomo_labels(text, label):
    assert parse_label("locomo", text) is label


def test_rules_follow_question_type_and_abstention():
    prompts = JudgePrompts()
    temporal = prompts.messages("longmemeval", question(), "18 days")[0]["content"]
    assert "off by one" in temporal and "18 days" in temporal and "19 days" in temporal
    update = prompts.messages("longmemeval", question(type="knowledge-update"), "x")[0]["content"]
    assert "updated value" in update
    pref = prompts.messages("longmemeval", question(type="single-session-preference"), "x")[0]["content"]
    assert "rubric" in pref
    abst = prompts.messages("longmemeval", question(type="multi-session", abstention=True), "x")[0]["content"]
    assert "not available" in abst
    plain = prompts.messages("longmemeval", question(type="multi-session"), "x")[0]["content"]
    assert "only part" in plain and "off by one" not in plain
    locomo = prompts.messages("locomo", question(), "x")[0]["content"]
    assert "CORRECT or WRONG" in locomo and "any format" in locomo


def test_style_and_version():
    assert style_for("locomo") == "locomo" and style_for("synthetic") == "longmemeval"
    assert style_for("locomo", "longmemeval") == "longmemeval"
    with pytest.raises(ValueError):
        style_for("x", "exact-match")
    assert JudgePrompts().version == JudgePrompts().version


def test_prompt_override_by_path(tmp_path):
    custom = tmp_path / "mine.txt"
    custom.write_text("Q={question} A={answer} R={response}")
    prompts = JudgePrompts(locomo=str(custom))
    assert prompts.messages("locomo", question(), "r")[0]["content"] == "Q=How many days ago? A=19 days R=r"
    assert prompts.version != JudgePrompts().version


def test_contains_reference_cross_check():
    from lazymem.eval.judge import contains_reference

    q = question(type="single-session-user", answer="Clover")
    assert contains_reference(q, "You named her Clover.") is True
    assert contains_reference(q, "Her name is Daisy.") is False
    assert contains_reference(question(answer="$45"), "It costs $45 a month now.") is True
    assert contains_reference(question(answer="3"), "You bought 3 gadgets") is True
    assert contains_reference(question(answer="x", abstention=True), "x") is None
    assert contains_reference(question(type="single-session-preference", answer="x"), "x") is None
