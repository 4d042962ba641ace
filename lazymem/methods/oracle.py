"""Oracle turn: the gold evidence messages themselves (an upper reference, not a method)."""

from __future__ import annotations

from lazymem.construct.render import render_raw
from lazymem.data.schema import History, Question
from lazymem.methods.base import Context, MemoryBlock


class OracleTurn:
    needs_retrieval = False
    roles = ()

    def __init__(self, name: str = "oracle_turn"):
        self.name = name

    async def build(self, question: Question, history: History, ctx: Context) -> MemoryBlock:
        shown = sorted(question.gold_idx)
        return MemoryBlock(text=render_raw([history.messages[i] for i in shown]), style="raw", shown=shown)
