"""SFT data: stratified sampling, discard reasons, window balancing, the LLaMA-Factory files."""

from __future__ import annotations

import asyncio
import json
from collections import Counter

from lazymem.construct.windows import Window
from lazymem.data.schema import Message, Question
from lazymem.llm.client import Completion
from lazymem.train import sft_data as sd


def question(i: int, qtype: str) -> Question:
    return Question(f"q{i}", qtype, "what?", "a", "h")


def test_stratified_sample_is_proportional_and_seeded():
    qs = [question(i, "a") for i in range(50)] + [question(50 + i, "b") for i in range(30)]
    qs += [question(80 + i, "c") for i in range(20)]
    picked = sd.stratified_sample(qs, 10, seed=1)
    assert Counter(q.type for q in picked) == {"a": 5, "b": 3, "c": 2}
    assert picked == sd.stratified_sample(qs, 10, seed=1)
    assert picked != sd.stratified_sample(qs, 10, seed=2)
    # largest remainder: 7 of (3, 3, 3) seats give 3/3/3 -> quotas 2.33 each, one extra seat by name
    even = [question(i, t) for t in "xyz" for i in range(3 * "xyz".index(t), 3 * "xyz".index(t) + 3)]
    assert sorted(Counter(q.type for q in sd.stratified_sample(even, 7, 0)).values()) == [2, 2, 3]
    assert len(sd.stratified_sample(qs, 500, 0)) == 100


def item(gold: tuple[bool, ...], key: str = "w") -> sd.WindowItem:
    n = len(gold)
    msgs = tuple(Message(i, "s", "t", "user", f"m{i}") for i in range(n))
    chat = [{"role": "system", "content": "sys"}, {"role": "user", "content": f"{key} {n}"}]
    return sd.WindowItem(question(0, "a"), Window(tuple(range(n)), (), 0), chat, gold, msgs)


def reply(*ops: str) -> str:
    return json.dumps(
        [{"op": o, "compressed_content": "c" if o == "KEEP" else "", "reason": "r"} for o in ops]
    )


class ScriptedTeacher:
    """Answers by the user message (so concurrent calls stay deterministic)."""

    def __init__(self, script: dict[str, Completion]):
        self.script, self.calls = script, []

    async def chat(self, messages, prompt_version="", response_format=None, **kw):
        self.calls.append(response_format)
        return self.script[messages[-1]["content"].split()[0]]


def test_annotate_counts_each_discard_reason():
    items = [
        item((True, False), "ok"),
        item((False, False), "think"),
        item((True, False), "dropgold"),
        item((False,), "notjson"),
        item((False,), "trunc"),
        item((False, False), "count"),
        item((False,), "schema"),
        item((False,), "err"),
    ]
    teacher = ScriptedTeacher(
        {
            "ok": Completion(reply("KEEP", "DROP"), reasoning="gold is first"),
            "think": Completion("<think>nothing here</think>\n" + reply("DROP", "DROP")),
            "dropgold": Completion(reply("DROP", "DROP")),
            "notjson": Completion("sure! here"),
            "trunc": Completion('[{"op": "KEEP"'),
            "count": Completion(reply("DROP")),
            "schema": Completion('[{"op": "MAYBE", "compressed_content": "", "reason": ""}]'),
            "err": Completion("", error="timeout"),
        }
    )
    kept, reasons, codes = asyncio.run(sd.annotate(teacher, items, "v1", with_reasoning=True))
    assert reasons == {"call_error": 1, "unparsable": 2, "schema": 1, "wrong_count": 1, "dropped_gold": 1}
    assert codes == {"not_json": 1, "truncated": 1, "bad_op": 1, "wrong_count": 1}
    assert [a.reasoning for a in kept] == ["gold is first", "nothing here"]
    assert teacher.calls[0]["json_schema"]["schema"]["minItems"] == 2
    target = sd.target_text(kept[0])
    assert target.startswith("<think>\ngold is first\n</think>\n\n")
    assert json.loads(target.split("</think>")[1])[0]["op"] == "KEEP"
    kept, *_ = asyncio.run(sd.annotate(teacher, items[:2], "v1", with_reasoning=False))
    assert [sd.target_text(a)[0] for a in kept] == ["[", "["]


def annotation(keep: bool, k: int) -> sd.Annotation:
    from lazymem.construct.decisions import Decision

    op = "KEEP" if keep else "DROP"
    return sd.Annotation(item((keep,), f"x{k}"), [Decision(op, "c" if keep else "", "")], "")


def test_balance_pairs_keep_windows_with_sampled_all_drop():
    anns = [annotation(True, k) for k in range(3)] + [annotation(False, k) for k in range(10)]
    out, info = sd.balance(anns, seed=3)
    assert len(out) == 6 and sum(a.has_keep for a in out) == 3
    assert info == {"with_keep": 3, "all_drop": 10, "all_drop_sampled": 3, "short_of_drop": False}
    assert out == sd.balance(anns, seed=3)[0]
    short, info = sd.balance(anns[:3] + anns[3:4], seed=0)
    assert len(short) == 4 and info["short_of_drop"]


def test_sharegpt_record_and_stats():
    anns = [annotation(True, 0), annotation(False, 1)]
    rec = sd.sharegpt_record(anns[0])
    assert [m["role"] for m in rec["messages"]] == ["system", "user", "assistant"]
    st = sd.stats([a.item for a in anns], anns, anns, {"call_error": 0}, {}, {}, lambda t: len(t))
    assert st["keep_share"] == 0.5 and st["balanced"] == 2 and st["windows"] == 2
    assert st["mean_input_tokens"] == (3 + 4) and st["mean_target_tokens"] > 0
