"""One question through one method: memory -> answer -> judge -> one record.

Stages run in order for a question; the windows inside the memory stage run concurrently. Any LLM call
that fails after its retries makes the record `status: error` with the message; nothing is scored.
"""

from __future__ import annotations

import time
import traceback

from lazymem import interrupt
from lazymem.construct.processor import StageError
from lazymem.data.schema import History, Question, query_time
from lazymem.eval.judge import Judge, contains_reference
from lazymem.llm.client import ProviderRefused
from lazymem.methods.base import Context, MemoryBlock, NotApplicable
from lazymem.prompts import Template
from lazymem.tokens import count_tokens


class Answerer:
    def __init__(self, client, system: Template, compressed: Template, raw: Template):
        self.client, self.system = client, system
        self.templates = {"compressed": compressed, "raw": raw}

    def messages(self, question: Question, history: History, memory: MemoryBlock) -> list[dict]:
        """The answer model's input: the system prompt and the memory style's user prompt."""
        user = self.templates[memory.style].format(
            query=question.text, query_time=query_time(question, history), memory=memory.text or "(no memory)"
        )
        return [{"role": "system", "content": self.system.text.strip()}, {"role": "user", "content": user}]

    async def __call__(self, question: Question, history: History, memory: MemoryBlock):
        chat = self.messages(question, history, memory)
        version = f"{self.system.version}-{self.templates[memory.style].version}"
        reply = await self.client.chat(chat, prompt_version=version)
        if reply.error:
            raise StageError(f"answer model call failed: {reply.error}")
        if not reply.text.strip():  # it thought until the budget ran out: no answer, not a wrong one
            raise StageError(f"answer model gave no final text (finish_reason={reply.finish_reason})")
        return reply.text.strip(), reply.reasoning or "", reply.latency_s


async def evaluate_question(
    question: Question, history: History, method, ctx: Context, answerer: Answerer, judge: Judge | None
) -> dict:
    """The record of one question; `judge=None` (warm-up and re-timing passes) leaves it unjudged."""
    record = {
        "qid": question.id,
        "method": method.name,
        "type": question.type,
        "abstention": question.abstention,
        "question": question.text,
        "reference": question.answer,
        "query_time": query_time(question, history),
        "gold_idx": list(question.gold_idx),
        # model-free metrics; a failed question keeps those of an empty answer (it counts as wrong)
        "scores": judge.scores(question, "") if judge else {},
    }
    interrupt.check()  # between questions: a signal stops the run even if its exception was swallowed
    if ctx.llms is not None:
        ctx.llms.revive()  # a dead server restarts (once); dying again raises ServerDied and ends the run
    t0 = time.perf_counter()
    try:
        memory = await method.build(question, history, ctx)
        record.update(
            memory=memory.text,
            memory_style=memory.style,
            shown=memory.shown,
            memory_tokens=count_tokens(memory.text),
            retrieved=memory.retrieved,
            retrieval_scores=memory.scores,
            windows=memory.windows,
            decided=memory.decided,
            detail=memory.detail,
        )
        t1 = time.perf_counter()
        answer, thinking, _ = await answerer(question, history, memory)
        t2 = time.perf_counter()
        correct, judge_raw = None, None
        if judge is not None:
            correct, judge_raw, _ = await judge(question, answer)
        t3 = time.perf_counter()
    except NotApplicable as e:
        return record | {"status": "not_applicable", "error": str(e)}
    except StageError as e:
        return record | {"status": "error", "error": str(e)}
    except ProviderRefused:
        raise  # every question would fail the same way: the run stops with its message
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
        scores=judge.scores(question, answer) if judge else {},
        contains_reference=contains_reference(question, answer),
        latency_s={k: round(v, 4) for k, v in latency.items()},
        build_s=round(t1 - t0, 4),
        status="ok",
        error=None,
    )
    return record
