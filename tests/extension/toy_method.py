"""A toy method defined outside lazymem: the last `k` messages of the history, verbatim."""

from __future__ import annotations

from lazymem.construct.render import render_raw
from lazymem.data.schema import History, Question
from lazymem.methods.base import Context, MemoryBlock


class Recent:
    needs_retrieval = False  # the job builds no retriever for it
    roles = ()  # it calls no LLM of its own (answer and judge belong to the job)

    def __init__(self, name: str = "recent", k: int = 2):
        self.name, self.k = name, k

    async def build(self, question: Question, history: History, ctx: Context) -> MemoryBlock:
        kept = history.messages[-self.k :]
        return MemoryBlock(text=render_raw(kept), style="raw", shown=[m.idx for m in kept])
