"""LazyMem: retrieve broadly, window, let the memory model KEEP/DROP every window in parallel."""

from __future__ import annotations

import time

from lazymem.construct.decisions import merge_decisions
from lazymem.construct.render import render_memory
from lazymem.construct.windows import build_windows
from lazymem.data.schema import History, Question
from lazymem.methods.base import Context, Memory, query_time


class LazyMem:
    needs_retrieval = True

    def __init__(
        self,
        name: str = "lazymem",
        n: int | None = None,
        radius: int = 2,
        max_len: int = 8,
        stride: int = 7,
        processor: str = "memory",
    ):
        self.name, self.n, self.radius, self.max_len, self.stride = name, n, radius, max_len, stride
        self.processor = processor  # which processor of the job (its LLM role) constructs the memory

    async def build(self, question: Question, history: History, ctx: Context) -> Memory:
        n = self.n if self.n is not None else ctx.retriever.n
        result, retrieval_s = ctx.search(question, history, n)
        windows = build_windows(result.indices, len(history.messages), self.radius, self.max_len, self.stride)
        t0 = time.perf_counter()
        processed = await ctx.processor[self.processor].process(
            question.text, query_time(question, history), windows, history.messages
        )
        processing_s = time.perf_counter() - t0
        merged = merge_decisions(windows, [w.decisions for w in processed])
        kept = {i: d.content for i, d in merged.items() if d.op == "KEEP"}
        shown = sorted(kept)
        return Memory(
            text=render_memory(history.messages, kept),
            style="compressed",
            shown=shown,
            timings={"retrieval": retrieval_s, "processing": processing_s},
            detail={
                "retrieved": result.indices,
                "scores": [round(s, 6) for s in result.scores],
                "windows": [w.to_record() for w in processed],
                "decided": sorted(merged),
            },
        )
