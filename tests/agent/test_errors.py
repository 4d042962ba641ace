"""The agent memory's error kinds (lazymem/agent/errors.py): one code and one HTTP status per kind, and
messages that a client can show without echoing what it sent."""

from __future__ import annotations

from lazymem.agent.errors import KINDS, AgentError, StoreUnavailable, UnknownMessages, UnknownUser


def test_every_kind_has_its_own_code_and_a_client_or_server_status():
    codes = [kind.code for kind in KINDS]
    assert len(set(codes)) == len(codes) and "error" not in codes
    assert all(issubclass(kind, AgentError) and 400 <= kind.status < 600 for kind in KINDS)
    assert set(AgentError.__subclasses__()) == set(KINDS)  # a new kind is listed for the docs and schema


def test_unknown_ids_are_counted_with_a_few_examples():
    assert str(UnknownMessages([7])) == "1 message id is not stored for this user (7); nothing was deleted"
    many = str(UnknownMessages(range(70_000, 0, -1)))
    assert many.startswith("70000 message ids are not stored for this user (1, 2, 3, 4, 5 and 69995 more)")
    assert len(many) < 120


def test_messages_are_plain_text_and_a_503_says_when_to_retry():
    assert str(UnknownUser("bob")) == "unknown user 'bob': no stored messages"  # not KeyError's repr
    assert UnknownUser("bob").user_id == "bob" and isinstance(UnknownUser("bob"), KeyError)
    down = StoreUnavailable("the database did not answer within 3s", retry_after_s=2.5)
    assert str(down) == "the database did not answer within 3s" and down.retry_after_s == 2.5
    assert (down.code, down.status) == ("store_unavailable", 503)
