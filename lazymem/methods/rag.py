"""RAG top-k: the same hybrid retrieval as LazyMem, the top k messages verbatim in chronological order."""

from __future__ import annotations

from lazymem.construct.render import render_raw
from lazymem.data.schema import History, Question
from lazymem.methods.base import Context, MemoryBlock


class RAG:
    needs_retrieval = True
    roles = ()

    def __init__(self, name: str = "rag", top_k: int = 20):
        self.name, self.top_k = name, top_k

    async def build(self, question: Question, history: History, ctx: Context) -> MemoryBlock:
        result, seconds = ctx.search(question, history, self.top_k)
        shown = sorted(result.indices)
        return MemoryBlock(
            text=render_raw([history.messages[i] for i in shown]),
            style="raw",
            shown=shown,
            timings={"retrieval": seconds},
            retrieved=list(result.indices),
            scores=[round(s, 6) for s in result.scores],
        )
