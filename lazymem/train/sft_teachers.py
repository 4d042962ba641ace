"""Who writes build_sft's targets (train.sft.teacher): an LLM role, as in the paper (D.2), or the
benchmark's own evidence labels (train.sft.teacher=gold, a CPU-only departure: docs/fidelity.md).

A teacher (conf/train.sft.teacher/NAME.yaml instantiates one) has

- `roles`: the LLM roles (llm.roles.NAME) it calls; build_sft checks, places and starts only these;
- `problems(with_reasoning)`: what stops it before any work, each with its fix;
- the coroutine `annotate(items, prompt_version, with_reasoning, llms)`: sft_data.annotate's
  (kept annotations, discards by reason, discards by gate code) for the window items.

Every reply goes through the same format gate (`check_decisions`) and gold check (sft_data.gated), so the
files build_sft writes have one shape whichever teacher wrote them.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from lazymem.construct.decisions import Decision
from lazymem.train import sft_data as sd

# The reasons the gold teacher writes: short and fixed, since the SFT model learns to write them too.
KEEP_REASON = "evidence for the question"
DROP_REASON = "not needed for the question"


class SftTeacher(Protocol):
    """What build_sft needs from a teacher (the module's docstring)."""

    roles: tuple[str, ...]

    def problems(self, with_reasoning: bool) -> list[str]: ...

    async def annotate(
        self, items: Sequence[sd.WindowItem], prompt_version: str, with_reasoning: bool, llms
    ) -> tuple[list[sd.Annotation], dict, dict]: ...


class LlmTeacher:
    """The paper's teacher: the LLM role `role` annotates each window with the memory model's own prompt."""

    def __init__(self, role: str = "teacher"):
        self.role = role
        self.roles = (role,)

    def problems(self, with_reasoning: bool) -> list[str]:
        return []

    async def annotate(self, items, prompt_version: str, with_reasoning: bool, llms):
        return await sd.annotate(llms[self.role], items, prompt_version, with_reasoning)


def shorten(text: str, max_chars: int | None) -> str:
    """`text` in at most `max_chars` characters, cut at the last word boundary that fits (None: verbatim).
    A first word longer than the cap is cut inside, so a text that is not blank never comes back empty."""
    if max_chars is None or len(text) <= max_chars:
        return text
    text = text.strip()
    if len(text) <= max_chars:
        return text
    head = text[: max_chars + 1]  # one more: a space right after the cap makes the cap itself a boundary
    space = max(head.rfind(c) for c in (" ", "\n", "\t", "\r"))
    cut = head[:space].rstrip() if space > 0 else ""
    return cut or text[:max_chars]


class GoldTeacher:
    """The question's evidence labels as the teacher, no LLM: each gold message of a window (item.gold) is
    KEEP with its own text as compressed_content, every other message DROP with "". There is no reasoning
    and no compression; a question without evidence (abstention) gives all-DROP windows only.

    `gold_max_chars` caps a KEEP's text (:func:`shorten`; None: verbatim). Verbatim long messages make
    long targets, and a small model trained on them writes long replies: slow on a CPU, and past GRPO's
    response cap they fail the format gate.
    """

    roles: tuple[str, ...] = ()

    def __init__(self, gold_max_chars: int | None = None):
        self.gold_max_chars = gold_max_chars

    def problems(self, with_reasoning: bool) -> list[str]:
        found = []
        if with_reasoning:
            found.append(
                "train.sft.teacher=gold writes no reasoning (the evidence labels have none): pass "
                "train.sft.with_reasoning=false"
            )
        cap = self.gold_max_chars
        if cap is not None and (isinstance(cap, bool) or not isinstance(cap, int) or cap < 1):
            found.append(
                f"train.sft.teacher.gold_max_chars = {cap!r}: a positive number of characters, or null "
                "for the messages verbatim"
            )
        return found

    def decisions(self, item: sd.WindowItem) -> list[Decision]:
        return [
            Decision("KEEP", shorten(m.text, self.gold_max_chars), KEEP_REASON)
            if gold
            else Decision("DROP", "", DROP_REASON)
            for gold, m in zip(item.gold, item.messages, strict=True)
        ]

    async def annotate(self, items, prompt_version: str, with_reasoning: bool, llms=None):
        if found := self.problems(with_reasoning):
            raise ValueError("; ".join(found))
        replies = [(it, sd.decisions_json(self.decisions(it))) for it in items]
        return sd.tally([sd.gated(it, reply, "", False) for it, reply in replies])
