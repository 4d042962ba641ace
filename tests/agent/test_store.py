"""The storage contract (lazymem/agent/store.py): `agent.store` names the store, and a wrong name or a
missing DSN fails with the key to set; what every store promises, tried on both."""

from __future__ import annotations

import pytest

from lazymem.agent.store import NewMessage, Snapshot, open_store


def test_open_store_names_its_kinds(tmp_path, pg_dsn):
    assert type(open_store({"kind": "sqlite"}, tmp_path)).__name__ == "SQLiteStore"
    pg = open_store({"kind": "postgres", "dsn": pg_dsn}, tmp_path)
    assert pg.derived_in_store
    pg.close()
    with pytest.raises(ValueError, match="needs agent.store.dsn"):
        open_store({"kind": "postgres", "dsn": None}, tmp_path)
    with pytest.raises(ValueError, match="expected sqlite or postgres"):
        open_store({"kind": "mongo"}, tmp_path)


@pytest.fixture(params=["sqlite", "postgres"])
def any_store(request, tmp_path):
    cfg = {"kind": request.param}
    if request.param == "postgres":
        cfg["dsn"] = request.getfixturevalue("pg_dsn")
    store = open_store(cfg, tmp_path)
    yield store
    store.close()


def test_a_snapshot_after_an_id_reads_only_newer_messages_with_the_generation(any_store):
    def new(*texts):
        return [NewMessage("user", t, "t", "s") for t in texts]

    ids = any_store.add("t", "u", new("a", "b"))
    full = any_store.snapshot("t", "u")
    assert [m.text for m in full.messages] == ["a", "b"]
    none_new = any_store.snapshot("t", "u", after=ids[-1])
    assert none_new == Snapshot(full.generation, [])  # nothing new, and still the same generation
    any_store.add("t", "other", new("x"))  # another user's id in between
    any_store.add("t", "u", new("c"))
    assert [m.text for m in any_store.snapshot("t", "u", after=ids[-1]).messages] == ["c"]
    any_store.forget("t", "u", [ids[0]])
    assert any_store.snapshot("t", "u", after=ids[-1]).generation != full.generation  # a deletion shows
    any_store.forget("t", "u")
    assert any_store.snapshot("t", "u", after=ids[-1]) == Snapshot(None, [])
    assert any_store.snapshot("t", "nobody", after=5) == Snapshot(None, [])


def test_a_limited_snapshot_reads_the_oldest_messages_page_by_page(any_store):
    ids = any_store.add("t", "u", [NewMessage("user", t, "t", "s") for t in "abcde"])
    pages, after = [], 0
    while page := any_store.snapshot("t", "u", after=after, limit=2).messages:
        pages.append([m.text for m in page])
        after = page[-1].id
    assert pages == [["a", "b"], ["c", "d"], ["e"]]
    assert any_store.snapshot("t", "u", limit=2).generation == any_store.snapshot("t", "u").generation
    assert [m.id for m in any_store.snapshot("t", "u", after=ids[1], limit=None).messages] == ids[2:]


def test_a_purge_names_each_users_deleted_messages_to_vector_keys_one_user_at_a_time(any_store):
    import time

    def new(*texts):
        return [NewMessage("user", t, "t", "s") for t in texts]

    any_store.add("t", "ann", new("a1", "a2"))
    any_store.add("t", "bob", new("b1"))
    any_store.add("other", "ann", new("elsewhere"))
    cut = time.time() + 1
    calls = []

    def keys(user, deleted):
        calls.append((user, sorted(m.text for m in deleted)))
        return {}

    assert any_store.purge("t", cut, vector_keys=keys) == {"ann": 2, "bob": 1}
    assert sorted(calls) == [("ann", ["a1", "a2"]), ("bob", ["b1"])]
    assert (
        any_store.snapshot("t", "ann").messages == []
        and len(any_store.snapshot("other", "ann").messages) == 1
    )
