"""Full history: as much of the conversation as fits a token budget, most recent messages first.

Not a paper baseline: a "just put it in the context" reference. Walking back from the last message, it
keeps a contiguous tail of the history whose rendered lines (`[time] role: text`) fit `budget_tokens`,
counting one extra token per line break; the block is then re-counted as a whole and trimmed from the
oldest end if BPE merges across lines ever push it over.
"""

from __future__ import annotations

from collections.abc import Callable

from lazymem.construct.render import message_line, render_raw
from lazymem.data.schema import History, Question
from lazymem.methods.base import Context, MemoryBlock
from lazymem.tokens import count_tokens

COUNTERS: dict[str, Callable[[str], int]] = {
    "qwen": count_tokens,  # the Qwen3 tokenizer the paper's memory-token counts use
    "words": lambda text: len(text.split()),  # cheap, tokenizer-free
}


class FullHistory:
    needs_retrieval = False
    roles = ()

    def __init__(self, name: str = "full_history", budget_tokens: int = 28000, count: str = "qwen"):
        if count not in COUNTERS:
            raise ValueError(f"count {count!r} not in {sorted(COUNTERS)}")
        if budget_tokens < 0:
            raise ValueError(f"budget_tokens must be >= 0, got {budget_tokens}")
        self.name, self.budget_tokens, self.count = name, budget_tokens, count

    async def build(self, question: Question, history: History, ctx: Context) -> MemoryBlock:
        counter = COUNTERS[self.count]
        kept, used = [], 0
        for message in reversed(history.messages):
            cost = counter(message_line(message)) + (1 if kept else 0)  # the newline joining it on
            if used + cost > self.budget_tokens:
                break
            kept.append(message)
            used += cost
        kept.reverse()
        text = render_raw(kept)
        while kept and counter(text) > self.budget_tokens:
            kept = kept[1:]
            text = render_raw(kept)
        return MemoryBlock(
            text=text,
            style="raw",
            shown=[m.idx for m in kept],
            detail={
                "history_kept": len(kept),
                "history_dropped": len(history.messages) - len(kept),
                "budget_tokens": self.budget_tokens,
            },
        )
