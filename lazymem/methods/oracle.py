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
        outside = [i for i in shown if not 0 <= i < len(history.messages)]
        if outside:
            raise ValueError(
                f"question {question.id}: evidence positions {outside} are outside its history "
                f"{history.id} of {len(history.messages)} messages"
            )
        return MemoryBlock(text=render_raw([history.messages[i] for i in shown]), style="raw", shown=shown)
