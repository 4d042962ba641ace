"""Referenced reasoning chains (paper App. E.2): written by the teacher from question, gold answer and gold
evidence, stored in the RL rows, and handed to the quality judge."""

from __future__ import annotations

import asyncio
import json

from lazymem.data.synthetic import load as synthetic
from lazymem.llm.client import Completion
from lazymem.llm.llm_set import build_llms
from lazymem.prompts import load
from lazymem.train.grpo import reward as reward_mod
from lazymem.train.grpo.quality_judge import JudgeScore, build_messages, load_template
from lazymem.train.grpo.reasoning_chain import reasoning_chains
from lazymem.train.grpo.rl_rows import ground_truth_json

from helpers_llm import llm_conf
from standin import STANDIN_SEARCHPATH

SYSTEM, USER = load("reasoning_chain_system"), load("reasoning_chain_user")


class FakeTeacher:
    """Replies with a thinking block and a chain; fails for the questions in `fail`."""

    def __init__(self, fail=()):
        self.calls, self.fail = [], set(fail)

    async def chat(self, messages, *, prompt_version="", **_):
        self.calls.append((messages, prompt_version))
        if any(q in messages[1]["content"] for q in self.fail):
            return Completion("", error="timeout")
        return Completion(f"<think>hmm</think>1. chain for {len(self.calls)}")


def test_one_chain_per_question_from_question_answer_and_evidence():
    ds = synthetic()
    questions = [q for q in ds.questions if q.gold_idx][:3]
    teacher = FakeTeacher(fail=[questions[2].text])
    chains, counts = asyncio.run(reasoning_chains(teacher, ds, questions, SYSTEM, USER))
    assert counts == {"questions": 3, "written": 2, "failed": 1}
    assert chains[questions[2].id] is None  # a failed call leaves the question without a chain
    assert all(chains[q.id].startswith("1. chain for") for q in questions[:2])  # thinking stripped
    for (messages, version), q in zip(teacher.calls, questions, strict=True):
        user = messages[1]["content"]
        assert q.text in user and q.answer in user
        for i in q.gold_idx:  # every gold message, none of the others
            assert ds.history(q).messages[i].text in user
        assert messages[0]["content"] == SYSTEM.text.strip()
        assert SYSTEM.version in version and USER.version in version  # part of the cache key


def test_the_judge_sees_the_rows_chain(monkeypatch):
    """The chain a row stores reaches the judge prompt's referenced_reasoning_chain field."""
    seen = []

    class Judge:
        async def score(self, item):
            seen.append(item)
            return JudgeScore(2, 2)

    monkeypatch.setattr(reward_mod, "get_judge", lambda cfg: Judge())
    msgs = [{"role": "user", "content": "I moved to Lyon in May", "timestamp": "2023/05/01"}]
    truth = ground_truth_json(
        query="where?",
        query_time="t",
        messages=msgs,
        gold=[True],
        answer="Lyon",
        reasoning="1. moved to Lyon",
    )
    reply = json.dumps([{"op": "KEEP", "compressed_content": "moved to Lyon", "reason": ""}])
    out = reward_mod.compute_score("lazymem", reply, truth, lam=0.5)
    assert out["judge_calls"] == 1 and seen[0].reasoning == "1. moved to Lyon"
    payload = json.loads(build_messages(seen[0], load_template())[1]["content"])
    assert payload["referenced_reasoning_chain"] == "1. moved to Lyon"


def test_the_teacher_writes_chains_through_the_cache(tmp_path):
    """The teacher role on the LLM stand-in (tests/standin.py): chains written, then read from the cache."""
    ds = synthetic()
    questions = [q for q in ds.questions if q.gold_idx][:2]
    cfg = llm_conf("standin", STANDIN_SEARCHPATH, f"llm.cache_path={tmp_path}/llm.sqlite")
    with build_llms(cfg, tmp_path / "servers") as llms:
        teacher = llms["teacher"]
        chains, counts = asyncio.run(reasoning_chains(teacher, ds, questions, SYSTEM, USER))
        again, _ = asyncio.run(reasoning_chains(teacher, ds, questions, SYSTEM, USER))
        hits = teacher.stats()
    assert counts == {"questions": 2, "written": 2, "failed": 0}
    assert all(chains[q.id].strip() for q in questions) and again == chains
    assert hits["cache_hits"] == 2  # the second round came from the cache, like every LLM call
