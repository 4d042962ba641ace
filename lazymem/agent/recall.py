"""What an agent memory query returns: the memory block, the stored messages whose content reached it, and
how it was made."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

from lazymem.agent.store import StoredMessage
from lazymem.data.schema import History
from lazymem.methods.base import MemoryBlock


@dataclass
class Recall:
    """What a query returns: the memory block the answer model would get and how it was made.

    `messages` are the messages whose content reached the block, oldest first: their store `id`, `time`,
    `role`, `session_id` and `text` as it appears in the block (the memory model's compression for
    LazyMem, the message verbatim for retrieval-only methods). `tokens` counts the block with Qwen's
    tokenizer; `timings` holds seconds per stage (`index`: refreshing the user's indexes, `retrieval`,
    `processing` when the memory model ran, `total`).
    """

    text: str
    style: str
    messages: list[dict[str, Any]]
    tokens: int
    timings: dict[str, float]

    @classmethod
    def of(
        cls,
        block: MemoryBlock,
        stored: Sequence[StoredMessage],
        history: History,
        timings: Mapping[str, float],
    ) -> Recall:
        """The recall of `block`, built over `history` (the `stored` messages, position by position)."""
        from lazymem.tokens import count_tokens

        texts = _block_texts(block, history)
        return cls(
            text=block.text,
            style=block.style,
            messages=[_shown(stored[i], texts[i]) for i in block.shown if i in texts],
            tokens=count_tokens(block.text),
            timings=dict(timings),
        )

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _shown(m: StoredMessage, text: str) -> dict[str, Any]:
    return {"id": m.id, "time": m.time, "role": m.role, "session_id": m.session_id, "text": text}


def _block_texts(block: MemoryBlock, history: History) -> dict[int, str]:
    """Each shown message's text as the block holds it: the memory model's compression where it rewrote
    the message, else the message itself."""
    texts = {i: block.compressed.get(i, history.messages[i].text).strip() for i in block.shown}
    return {i: text for i, text in texts.items() if text}  # blank KEEP contents are not in the block
