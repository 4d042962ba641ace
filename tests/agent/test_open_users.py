"""The users one process holds open (lazymem/agent/open_users.py): an LRU bounded by users and by the
messages their indexes hold, reads of only what was added since, everything read again and derived data
dropped when another process deleted some of a user's messages, and the user folders."""

from __future__ import annotations

import pytest

from lazymem.agent.errors import UnknownUser
from lazymem.agent.inputs import Limits
from lazymem.agent.open_users import OpenUsers
from lazymem.agent.runtime import Runtime
from lazymem.agent.sqlite_store import SQLiteStore


class Closes:
    """Stands in for a user's LLM roles: counts its closes."""

    def __init__(self):
        self.closed = 0

    def close(self):
        self.closed += 1


@pytest.fixture
def users(tmp_path):
    """OpenUsers over a SQLite store, without retrieval, each user's LLM roles a `Closes`."""
    store, runtime = SQLiteStore(tmp_path), Runtime()
    opened = OpenUsers(store, runtime, tmp_path, None, lambda derived: Closes(), max_users=2)
    yield opened
    opened.close()
    runtime.close()
    store.close()


def add(users: OpenUsers, user: str, *texts: str) -> list[int]:
    batch = Limits().check_messages([{"role": "user", "text": t} for t in texts], "2025-01-01")
    return users.store.add("t", user, batch).ids


def test_a_user_folder_is_named_by_a_hash_of_tenant_and_user(users, tmp_path):
    folder = users.folder("t", "../kim")
    assert folder.parent == tmp_path / "users" and len(folder.name) == 32 and "kim" not in folder.name
    assert users.folder("t", "../kim") == folder and users.folder("u", "../kim") != folder


def test_one_lock_per_user_while_it_is_held(users):
    lock = users.lock("t", "kim").lock
    assert users.lock("t", "kim").lock is lock and users.lock("t", "lee").lock is not lock


def test_the_least_recently_used_users_are_closed_beyond_the_bound(users):
    async def go():
        for user in ("ann", "bob", "cy"):
            add(users, user, f"{user} likes tea.")
        ann = await users.read("t", "ann")
        await users.read("t", "bob")
        await users.read("t", "ann")  # ann is used again: bob is now the least recent
        await users.read("t", "cy")
        return ann

    ann = users.runtime.run(go())
    assert users.recency() == [("t", "ann"), ("t", "cy")] and users.get(("t", "bob")) is None
    assert [m.text for m in ann.history] == ["ann likes tea."] and ann.llms.closed == 0
    with pytest.raises(UnknownUser):
        users.runtime.run(users.read("t", "nobody"))


def test_a_refresh_drops_the_users_whose_generation_moved_and_their_folders(users):
    add(users, "ann", "a")
    ids = add(users, "bob", "b", "c")
    ann = users.runtime.run(users.read("t", "ann"))
    bob = users.runtime.run(users.read("t", "bob"))
    users.folder("t", "bob").mkdir(parents=True)
    assert users.runtime.run(users.refresh()) == 0
    users.store.forget("t", "bob", [ids[0]], None)  # as another process would
    assert users.runtime.run(users.refresh()) == 1
    assert users.recency() == [("t", "ann")] and bob.llms.closed == 1 and ann.llms.closed == 0
    assert not users.folder("t", "bob").exists()
    assert [m.text for m in users.runtime.run(users.read("t", "bob")).history] == ["c"]


def test_a_store_holding_the_derived_data_starts_with_no_user_folders(tmp_path):
    class InStore:
        derived_in_store = True

    (tmp_path / "users" / "old").mkdir(parents=True)
    OpenUsers(InStore(), Runtime(), tmp_path, None, lambda derived: None)
    assert not (tmp_path / "users").exists() and tmp_path.exists()


def test_open_users_are_bounded_by_the_messages_their_indexes_hold(tmp_path):
    from lazymem import Memory

    overrides = [
        "method=rag",
        "agent.max_open_messages=5",
        f"agent.dir={tmp_path}",
        f"paths.cache={tmp_path}",
    ]
    with Memory.from_config(overrides) as memory:
        for user in ("ann", "bob"):
            memory.add(user, [{"role": "user", "text": f"{user} note {n}"} for n in range(4)])
        memory.query("ann", "notes?")
        memory.query("bob", "notes?")  # 8 messages open > 5: ann's indexes are closed
        assert [user for _, user in memory.open_users.recency()] == ["bob"]
        memory.add("cy", [{"role": "user", "text": f"cy note {n}"} for n in range(9)])
        memory.query("cy", "notes?")  # over the bound alone: the queried user stays open
        assert [user for _, user in memory.open_users.recency()] == ["cy"]
        assert "ann note" in memory.query("ann", "notes?").text  # reopened when it comes back


def test_a_query_reads_only_what_was_added_since_and_all_after_a_deletion_elsewhere(tmp_path, monkeypatch):
    from lazymem import Memory

    overrides = ["method=rag", "method.top_k=5", f"agent.dir={tmp_path / 'data'}", f"paths.cache={tmp_path}"]
    with Memory.from_config(overrides) as mine, Memory.from_config(overrides) as other:
        reads, snapshot = [], mine.store.snapshot

        def spy(tenant, user, after=0):  # records the `after` of every snapshot read
            reads.append(after)
            return snapshot(tenant, user, after)

        monkeypatch.setattr(mine.store, "snapshot", spy)
        ids = mine.add("kim", [{"role": "user", "text": t} for t in ("My bike is red.", "I like tea.")])
        assert "red" in mine.query("kim", "What colour is my bike?").text
        assert reads == [0]
        new = mine.add("kim", [{"role": "user", "text": "My locker code is 4711."}])
        assert "4711" in mine.query("kim", "What is my locker code?").text
        assert reads == [0, ids[-1]]  # only the new message was read
        other.forget("kim", [new[0]])  # another process (a replica) deletes a message
        recall = mine.query("kim", "What is my locker code?")
        assert "4711" not in recall.text and [m["id"] for m in recall.messages] == ids
        assert reads == [0, ids[-1], new[0], 0]  # the generation moved: everything read again
