"""What a query returns (lazymem/agent/recall.py): each shown message with its store id and the text the
block holds for it, the memory model's compression where it rewrote one, and no message the block left
blank."""

from __future__ import annotations

from lazymem.agent.recall import Recall
from lazymem.agent.store import StoredMessage
from lazymem.data.schema import History, Message
from lazymem.methods.base import MemoryBlock

TEXTS = ["I adopted a dog.", "Congratulations!", "Her name is Biscuit and she is tiny.", "Cute."]
STORED = [StoredMessage(10 + i, "s1", "2025-01-01", "user", t, 0.0) for i, t in enumerate(TEXTS)]
HISTORY = History("user", [Message(i, m.session_id, m.time, m.role, m.text) for i, m in enumerate(STORED)])


def test_shown_messages_carry_their_store_ids_and_the_text_the_block_holds():
    block = MemoryBlock(
        text="[2025-01-01] user: I adopted a dog.\n[2025-01-01] user: Biscuit, tiny.",
        style="compressed",
        shown=[0, 1, 2],
        compressed={1: "  ", 2: "Biscuit, tiny."},  # message 1 was kept with nothing left
    )
    recall = Recall.of(block, STORED, HISTORY, {"retrieval": 0.5, "total": 1.0})
    assert [(m["id"], m["text"]) for m in recall.messages] == [
        (10, "I adopted a dog."),
        (12, "Biscuit, tiny."),
    ]
    assert recall.messages[0] == {
        "id": 10,
        "time": "2025-01-01",
        "role": "user",
        "session_id": "s1",
        "text": "I adopted a dog.",
    }
    assert (recall.text, recall.style, recall.timings) == (
        block.text,
        "compressed",
        {"retrieval": 0.5, "total": 1.0},
    )
    assert 10 < recall.tokens < 40


def test_a_recall_is_plain_data():
    block = MemoryBlock(text="Cute.", style="raw", shown=[3])
    data = Recall.of(block, STORED, HISTORY, {"total": 0.1}).to_dict()
    assert data["messages"] == [
        {"id": 13, "time": "2025-01-01", "role": "user", "session_id": "s1", "text": "Cute."}
    ]
    assert Recall(**data).to_dict() == data
