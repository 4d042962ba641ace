"""What a process holds open per user (lazymem/agent/user_state.py): the messages as last read, extended in
place with their positions continuing, and the same record for a stored and a new message."""

from __future__ import annotations

from lazymem.agent.store import NewMessage, StoredMessage
from lazymem.agent.user_state import UserState, as_message


class Closes:
    closed = 0

    def close(self):
        self.closed += 1


def stored(id: int, text: str) -> StoredMessage:
    return StoredMessage(id, "s1", "2025-01-01", "user", text, 0.0)


def test_an_extended_state_continues_the_positions_and_knows_its_last_id():
    state = UserState(3, None, None)
    assert (state.messages, state.last_id, state.warmed) == (0, 0, 0)
    state.extend([stored(4, "a"), stored(9, "b")])
    state.extend([stored(12, "c")])
    assert [m.idx for m in state.history] == [0, 1, 2]
    assert [m.text for m in state.history] == ["a", "b", "c"]
    assert (state.messages, state.last_id, state.generation) == (3, 12, 3)


def test_closing_closes_the_users_retriever_and_llm_roles():
    retriever, llms = Closes(), Closes()
    UserState(1, retriever, llms).close()
    assert (retriever.closed, llms.closed) == (1, 1)
    UserState(1, None, None).close()  # a method without retrieval or roles holds neither


def test_a_new_and_a_stored_message_make_the_same_record():
    new = NewMessage("user", "I ski.", "2025-01-01", "s1", source="f:1")
    assert as_message(5, new) == as_message(5, stored(77, "I ski.")) and as_message(5, new).idx == 5
