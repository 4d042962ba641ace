"""build_sft's teachers (lazymem/train/sft_teachers.py): the LLM role, and the evidence labels (gold) whose
targets go through the same format gate; gold_max_chars's word-boundary cut. The CLI runs: tests/tasks/
test_build_sft.py."""

from __future__ import annotations

import asyncio
import json

import pytest

from lazymem.construct.decisions import check_decisions
from lazymem.construct.windows import Window
from lazymem.data.schema import Message, Question
from lazymem.llm.client import Completion
from lazymem.train import sft_data as sd
from lazymem.train.sft_teachers import (
    DROP_REASON,
    KEEP_REASON,
    GoldTeacher,
    LlmTeacher,
    shorten,
)


def item(texts: list[str], gold: tuple[bool, ...]) -> sd.WindowItem:
    q = Question("q0", "single-session-user", "what?", "a", "h")
    msgs = tuple(Message(i, "s", "t", "user", text) for i, text in enumerate(texts))
    chat = [{"role": "system", "content": "sys"}, {"role": "user", "content": "prompt"}]
    return sd.WindowItem(q, Window(tuple(range(len(texts))), (), 0), chat, gold, msgs)


def gold_annotate(teacher, items, with_reasoning=False):
    return asyncio.run(teacher.annotate(items, "v1", with_reasoning, None))


def test_shorten_cuts_at_a_word_boundary_never_empty_never_longer():
    text = "I adopted a dog named Biscuit last spring"
    assert shorten(text, None) == text and shorten(text, len(text)) == text
    assert shorten(text, 20) == "I adopted a dog"  # "named" would end at 21
    assert shorten(text, 21) == "I adopted a dog named"  # the cap falls right before a space: kept
    assert shorten("  padded text  ", 11) == "padded text"  # stripped before it is cut
    assert shorten("Supercalifragilistic word", 5) == "Super"  # one long first word: cut inside it
    assert shorten("a\nnew line", 6) == "a\nnew"
    for n in range(1, len(text) + 1):
        cut = shorten(text, n)
        assert cut and len(cut) <= n and text.startswith(cut)
        # a whole-word prefix unless the first word itself is longer than the cap
        assert len(cut) == len(text) or text[len(cut)] == " " or (" " not in cut and len(cut) == n)


def test_gold_teacher_keeps_the_gold_verbatim_and_drops_the_rest_through_the_gate():
    teacher = GoldTeacher()
    assert teacher.roles == ()
    items = [
        item(["hi there", "I named my dog Biscuit", "nice"], (False, True, False)),
        item(["weather talk", "more weather"], (False, False)),  # an abstention: no evidence
    ]
    kept, reasons, codes = gold_annotate(teacher, items)
    assert [a.item for a in kept] == items and sum(reasons.values()) == 0 and codes == {}
    assert set(reasons) == set(sd.REASONS)  # the same counters as the LLM path
    first, abstention = (sd.target_text(a) for a in kept)
    assert not first.startswith("<think>")  # no reasoning
    gate = check_decisions(first, 3)
    assert gate.ok
    assert [(d.op, d.content, d.reason) for d in gate.decisions] == [
        ("DROP", "", DROP_REASON),
        ("KEEP", "I named my dog Biscuit", KEEP_REASON),
        ("DROP", "", DROP_REASON),
    ]
    assert [d["op"] for d in json.loads(abstention)] == ["DROP", "DROP"] and not kept[1].has_keep


def test_gold_targets_pass_the_same_gate_a_blank_gold_message_is_discarded():
    kept, reasons, codes = gold_annotate(GoldTeacher(), [item(["   ", "x"], (True, False))])
    assert kept == [] and reasons["schema"] == 1 and codes == {"empty_keep": 1}


def test_gold_max_chars_shortens_each_keep():
    long = "word " * 40
    kept, *_ = gold_annotate(GoldTeacher(gold_max_chars=12), [item([long, "short"], (True, True))])
    assert [d.content for d in kept[0].decisions] == ["word word", "short"]


def test_gold_teacher_refuses_reasoning_and_a_bad_cap():
    assert "train.sft.with_reasoning=false" in GoldTeacher().problems(True)[0]
    assert GoldTeacher().problems(False) == [] and GoldTeacher(300).problems(False) == []
    for bad in (0, -3, "ten", 2.5):
        assert "gold_max_chars" in GoldTeacher(bad).problems(False)[0]
    with pytest.raises(ValueError, match="with_reasoning=false"):
        gold_annotate(GoldTeacher(), [item(["a"], (True,))], with_reasoning=True)


def test_llm_teacher_asks_its_role_and_keeps_its_reasoning():
    reply = json.dumps([{"op": "KEEP", "compressed_content": "dog: Biscuit", "reason": "r"}])

    class Client:
        async def chat(self, messages, prompt_version="", response_format=None, **kw):
            return Completion(reply, reasoning="the dog")

    teacher = LlmTeacher(role="tutor")
    assert teacher.roles == ("tutor",) and teacher.problems(True) == []
    kept, reasons, _ = asyncio.run(teacher.annotate([item(["a"], (True,))], "v1", True, {"tutor": Client()}))
    assert sum(reasons.values()) == 0
    assert sd.target_text(kept[0]).startswith("<think>\nthe dog\n</think>\n\n[")
