"""Plain-text renderings: a window for the memory-model prompt, and memory blocks for the answer model.

Every message line has the form `[time] role: text`, so raw and constructed memory read the same.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from lazymem.construct.windows import Window
from lazymem.data.schema import Message

SECTIONS = ("previous_bridge", "core_messages", "next_bridge")
EMPTY_SECTION = "(none)"


def message_line(message: Message, text: str | None = None) -> str:
    """`[time] role: text`; the text is kept as is, newlines included."""
    return f"[{message.time}] {message.role}: {message.text if text is None else text}"


def window_sections(window: Window) -> dict[str, tuple[int, ...]]:
    """Split a window's indices into the prompt's three sections (Listing 1 of the paper).

    previous_bridge: before the first core message; core_messages: first to last core message,
    including bridges between them; next_bridge: after the last core message. A window without core
    messages (the context-only tail of a split window) puts everything under core_messages, so the
    model is never shown an empty core section beside populated bridges.
    """
    if not window.core:
        return {"previous_bridge": (), "core_messages": window.idx, "next_bridge": ()}
    first, last = window.core[0], window.core[-1]
    return {
        "previous_bridge": tuple(i for i in window.idx if i < first),
        "core_messages": tuple(i for i in window.idx if first <= i <= last),
        "next_bridge": tuple(i for i in window.idx if i > last),
    }


def _lookup(messages: Sequence[Message], i: int) -> Message:
    if not 0 <= i < len(messages) or messages[i].idx != i:
        raise ValueError(f"messages must be the full history indexed by Message.idx; no message {i} at {i}")
    return messages[i]


def render_window(window: Window, messages: Sequence[Message]) -> str:
    """The window text for the memory-model prompt.

    `messages` is the whole history (messages[i].idx == i). Entries are numbered 1..len(window)
    across all three sections, in the order the decisions must follow.
    """
    blocks, number = [], 1
    for name, indices in window_sections(window).items():
        lines = [f"{name}:"]
        for i in indices:
            lines.append(f"{number}. {message_line(_lookup(messages, i))}")
            number += 1
        if not indices:
            lines.append(EMPTY_SECTION)
        blocks.append("\n".join(lines))
    return "\n\n".join(blocks)


def render_memory(messages: Sequence[Message], kept: Mapping[int, str]) -> str:
    """The constructed memory block m_q: kept compressions in chronological order, one per line.

    `kept` maps message index to compressed content; blank contents are skipped.
    """
    lines = []
    for i in sorted(kept):
        content = kept[i].strip()
        if content:
            lines.append(message_line(_lookup(messages, i), content))
    return "\n".join(lines)


def render_raw(messages: Sequence[Message]) -> str:
    """Raw messages as a memory block (RAG and oracle baselines), chronological by Message.idx."""
    return "\n".join(message_line(m) for m in sorted(messages, key=lambda m: m.idx))
