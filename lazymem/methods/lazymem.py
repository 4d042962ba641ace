"""LazyMem: retrieve broadly, window, let the memory model KEEP/DROP every window in parallel."""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

from lazymem.construct.decisions import kept_content, merge_decisions
from lazymem.construct.processor import InvalidPolicy, MemoryProcessor
from lazymem.construct.render import render_memory
from lazymem.construct.windows import build_windows
from lazymem.data.schema import History, Question, query_time
from lazymem.methods.base import Context, MemoryBlock
from lazymem.prompts import load


class LazyMem:
    """Its own config (conf/method/lazymem.yaml) names the memory model's role, prompts and how replies
    that fail the format gate are handled (`construct`, the job's conf/construct/ choice by default), so
    two LazyMem rows of one job (e.g. the 32B and the 4B memory model) can differ in any of them."""

    needs_retrieval = True

    def __init__(
        self,
        name: str = "lazymem",
        n: int | None = None,
        radius: int = 2,
        max_len: int = 8,
        stride: int = 7,
        role: str = "memory",
        system_prompt: str = "memory_system",
        user_prompt: str = "memory_user",
        construct: Mapping[str, Any] | None = None,
    ):
        self.name, self.n, self.radius, self.max_len, self.stride = name, n, radius, max_len, stride
        self.role, self.roles = role, (role,)
        self.system, self.user = load(system_prompt), load(user_prompt)
        self.policy = InvalidPolicy.from_config(construct or {})

    def processor(self, ctx: Context) -> MemoryProcessor:
        return MemoryProcessor(ctx.llms[self.role], self.system, self.user, self.policy)

    async def build(self, question: Question, history: History, ctx: Context) -> MemoryBlock:
        n = self.n if self.n is not None else ctx.retriever.n
        result, retrieval_s = ctx.search(question, history, n)
        windows = build_windows(result.indices, len(history.messages), self.radius, self.max_len, self.stride)
        t0 = time.perf_counter()
        processed = await self.processor(ctx).process(
            question.text, query_time(question, history), windows, history.messages
        )
        processing_s = time.perf_counter() - t0
        merged = merge_decisions(windows, [w.decisions for w in processed])
        kept = kept_content(merged)
        return MemoryBlock(
            text=render_memory(history.messages, kept),
            style="compressed",
            shown=sorted(kept),
            timings={"retrieval": retrieval_s, "processing": processing_s},
            retrieved=list(result.indices),
            scores=[round(s, 6) for s in result.scores],
            windows=[w.to_record() for w in processed],
            decided=sorted(merged),
            compressed=kept,
        )
