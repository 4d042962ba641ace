"""Referenced reasoning chains for the quality-reward judge (paper Appendix E.2, Listing 2).

The judge grades utility against the gold answer and a reasoning chain that leads to it. The benchmark has
no such chain, so the teacher role writes one per question from the question, its gold answer and its gold
evidence messages (prompt: lazymem/prompts/reasoning_chain_{system,user}.txt, our wording). Calls go
through the LLM client and its cache like every call; a failed call leaves the question without a chain
(the judge then sees an empty field) and is counted.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

from lazymem.data.schema import Dataset, Question, query_time
from lazymem.prompts import Template


def render_evidence(ds: Dataset, q: Question) -> str:
    """The question's gold messages, numbered, each with its timestamp and role."""
    msgs = ds.history(q).messages
    lines = [f"{k}. [{msgs[i].time}] {msgs[i].role}: {msgs[i].text}" for k, i in enumerate(q.gold_idx, 1)]
    return "\n".join(lines) or "(no evidence message: the answer says the information is not available)"


def chain_prompt(ds: Dataset, q: Question, system: Template, user: Template) -> list[dict[str, str]]:
    when = query_time(q, ds.history(q))
    text = user.format(query=q.text, query_time=when, answer=q.answer, evidence=render_evidence(ds, q))
    return [{"role": "system", "content": system.text.strip()}, {"role": "user", "content": text}]


async def reasoning_chains(
    teacher, ds: Dataset, questions: Sequence[Question], system: Template, user: Template
) -> tuple[dict[str, str | None], dict]:
    """{question id: chain or None}, and counts (questions, written, failed)."""
    version = f"reasoning_chain@{system.version}+{user.version}"

    async def one(q: Question) -> str | None:
        reply = await teacher.chat(chain_prompt(ds, q, system, user), prompt_version=version)
        if not reply.ok:
            return None
        chain = reply.text.strip()
        return chain or None

    chains = await asyncio.gather(*(one(q) for q in questions))
    out = {q.id: c for q, c in zip(questions, chains, strict=True)}
    failed = sum(1 for c in chains if c is None)
    return out, {"questions": len(out), "written": len(out) - failed, "failed": failed}
