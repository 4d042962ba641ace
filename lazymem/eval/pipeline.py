"""One question through one method: memory -> answer -> judge -> one record.

Stages run in order for a question; the windows inside the memory stage run concurrently. Any LLM call
that fails after its retries makes the record `status: error` with the message; nothing is scored.
"""

from __future__ import annotations

import time
import traceback

from hydra.utils import instantiate

from lazymem import interrupt
from lazymem.construct.processor import StageError
from lazymem.data.schema import History, Question, query_time
from lazymem.eval.judge import DECISION_RULES, JudgePrompts, contains_reference, parse_label
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


class Judge:
    """One benchmark's LLM judge and its model-free metrics (e.g. LoCoMo's token F1)."""

    def __init__(self, client, prompts: JudgePrompts, max_tokens=None, metrics=None):
        self.client, self.prompts, self.style = client, prompts, prompts.style
        self.max_tokens = max_tokens  # the benchmark's output budget, a decoding override; None = the role's
        self.metrics = dict(metrics or {})  # name -> callable(question, answer) -> float | None

    @classmethod
    def from_config(cls, client, data) -> Judge:
        """The judge and metrics a benchmark's data config declares (`judge:` and `metrics:`)."""
        spec = data.get("judge")
        if not hasattr(spec, "get") or not spec.get("style"):
            raise ValueError(
                f"the data config of {data.get('name')!r} declares no judge: add a `judge:` block with "
                "style, prompt (and rules for the longmemeval style), as conf/data/*.yaml do"
            )
        prompts = JudgePrompts(spec.style, spec.prompt, spec.get("rules"), spec.get("official_src"))
        metrics = {name: instantiate(m) for name, m in (data.get("metrics") or {}).items()}
        return cls(client, prompts, spec.get("max_tokens"), metrics)

    @property
    def identity(self) -> dict:
        """Who judged and how: written into every summary and named in the results' captions."""
        cfg = self.client.cfg
        return {
            "model": cfg.served_name,
            "model_id": cfg.model_id or None,
            "style": self.style,
            "prompts": self.prompts.source(),
            "prompts_sha256": self.prompts.official_sha256,
            "prompt_version": self.prompts.version,
            "decision_rule": DECISION_RULES[self.style],
            "temperature": cfg.decoding.temperature,
            "max_tokens": cfg.decoding.max_tokens if self.max_tokens is None else self.max_tokens,
            "metrics": sorted(self.metrics),
        }

    async def __call__(self, question: Question, answer: str):
        chat = self.prompts.messages(question, answer)
        budget = {} if self.max_tokens is None else {"max_tokens": int(self.max_tokens)}
        reply = await self.client.chat(chat, prompt_version=self.prompts.version, **budget)
        if reply.error:
            raise StageError(f"judge call failed: {reply.error}")
        if not reply.text.strip():  # never a silent "incorrect" for a judge cut short while thinking
            raise StageError(f"judge gave no final text (finish_reason={reply.finish_reason})")
        return parse_label(self.style, reply.text), reply.text, reply.latency_s

    def scores(self, question: Question, answer: str) -> dict:
        """The model-free metrics of one answer; a failed question is scored with an empty answer."""
        return {name: metric(question, answer) for name, metric in self.metrics.items()}


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
