"""Oracle session: every message of the sessions holding the gold evidence (an upper reference).

The paper defines it for LongMemEval only (Table 1: "Oracle Session is not defined for LoCoMo"), so the
method refuses benchmarks outside `applicable_to` by raising `NotApplicable`. It learns the benchmark
from `ctx.dataset_name` (set by the evaluate task to `Dataset.name`); when a context carries no name
the method runs, so it stays usable on hand-made histories.
"""

from __future__ import annotations

from collections.abc import Sequence

from lazymem.construct.render import render_raw
from lazymem.data.schema import History, Question
from lazymem.methods.base import Context, MemoryBlock, NotApplicable

__all__ = ["NotApplicable", "OracleSession", "evidence_sessions"]


class OracleSession:
    needs_retrieval = False
    roles = ()

    def __init__(
        self, name: str = "oracle_session", applicable_to: Sequence[str] = ("longmemeval", "synthetic")
    ):
        self.name = name
        self.applicable_to = tuple(applicable_to)

    async def build(self, question: Question, history: History, ctx: Context) -> MemoryBlock:
        dataset = ctx.dataset_name
        if dataset is not None and dataset not in self.applicable_to:
            raise NotApplicable(f"{self.name} is not defined for {dataset} (only {list(self.applicable_to)})")
        wanted = evidence_sessions(question, history)
        messages = [m for m in history.messages if m.session_id in wanted]
        present = set(history.session_ids)
        return MemoryBlock(
            text=render_raw(messages),
            style="raw",
            shown=[m.idx for m in messages],
            detail={
                "oracle_sessions": [s for s in history.session_ids if s in wanted],
                "oracle_sessions_missing": [s for s in wanted if s not in present],
            },
        )


def evidence_sessions(question: Question, history: History) -> list[str]:
    """The question's gold sessions, else the sessions of its gold messages (order of first mention)."""
    if question.gold_sessions:
        return list(dict.fromkeys(question.gold_sessions))
    return list(dict.fromkeys(history.messages[i].session_id for i in question.gold_idx))
