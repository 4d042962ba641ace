"""One question through one method: memory -> answer -> judge -> one record.

Stages run in order for a question; the windows inside the memory stage run concurrently. Any LLM call
that fails after its retries makes the record `status: error` with the message; nothing is scored.
"""

from __future__ import annotations

import time
import traceback

from lazymem.construct.decisions import split_thinking
from lazymem.construct.processor import StageError
from lazymem.data.schema import History, Question
from lazymem.eval.judge import JudgePrompts, contains_reference, parse_label
from lazymem.methods.base import Context, Memory, NotApplicable, query_time
from lazymem.prompts import Template
from lazymem.tokens import count_tokens


class Answerer:
    def __init__(self, client, system: Template, compressed: Template, raw: Template):
        self.client, self.system = client, system
        self.templates = {"compressed": compressed, "raw": raw}

    async def __call__(self, question: Question, history: History, memory: Memory):
        template = self.templates[memory.style]
        user = template.format(
            query=question.text, query_time=query_time(question, history), memory=memory.text or "(no memory)"
        )
        chat = [{"role": "system", "content": self.system.text.strip()}, {"role": "user", "content": user}]
        reply = await self.client.chat(chat, prompt_version=f"{self.system.version}-{template.version}")
        if reply.error:
            raise StageError(f"answer model call failed: {reply.error}")
        thinking, final = split_thinking(reply.text)
        return final, reply.reasoning or thinking, reply.latency_s


class Judge:
    def __init__(self, client, prompts: JudgePrompts, style: str):
        self.client, self.prompts, self.style = client, prompts, style

    async def __call__(self, question: Question, answer: str):
        chat = self.prompts.messages(self.style, question, answer)
        reply = await self.client.chat(chat, prompt_version=self.prompts.version)
        if reply.error:
            raise StageError(f"judge call failed: {reply.error}")
        return parse_label(self.style, reply.text), reply.text, reply.latency_s


async def evaluate_question(
    question: Question, history: History, method, ctx: Context, answerer: Answerer, judge: Judge
) -> dict:
    record = {
        "qid": question.id,
        "method": method.name,
        "type": question.type,
        "abstention": question.abstention,
        "question": question.text,
        "reference": question.answer,
        "query_time": query_time(question, history),
        "gold_idx": list(question.gold_idx),
    }
    t0 = time.perf_counter()
    try:
        memory = await method.build(question, history, ctx)
        record.update(memory.detail)
        record.update(
            memory=memory.text,
            memory_style=memory.style,
            shown=memory.shown,
            memory_tokens=count_tokens(memory.text),
        )
        t1 = time.perf_counter()
        answer, thinking, _ = await answerer(question, history, memory)
        t2 = time.perf_counter()
        correct, judge_raw, _ = await judge(question, answer)
        t3 = time.perf_counter()
    except NotApplicable as e:
        return record | {"status": "not_applicable", "error": str(e)}
    except StageError as e:
        return record | {"status": "error", "error": str(e)}
    except Exception as e:  # a bug must not lose the rest of the run; the record keeps the trace
        return record | {
            "status": "error",
            "error": f"{type(e).__name__}: {e}",
            "traceback": traceback.format_exc(limit=8),
        }
    latency = dict(memory.timings)
    latency.update(answer=t2 - t1, judge=t3 - t2)
    latency["total"] = latency.get("retrieval", 0.0) + latency.get("processing", 0.0) + latency["answer"]
    record.update(
        answer=answer,
        answer_thinking=thinking,
        correct=correct,
        judge_raw=judge_raw,
        contains_reference=contains_reference(question, answer),
        latency_s={k: round(v, 4) for k, v in latency.items()},
        build_s=round(t1 - t0, 4),
        status="ok",
        error=None,
    )
    return record
