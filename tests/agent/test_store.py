"""The storage contract (lazymem/agent/store.py): the config group conf/agent/store/ builds each store by its
`_target_`, and the contract module names no store; what every store promises, tried on both: aliases,
idempotency keys, readiness, and tombstones (a forgotten message is not stored again by an import of its key;
forget_all clears them; a plain add is never taken for a forgotten message) among them."""

from __future__ import annotations

import ast
import socket
import sqlite3
import time
from contextlib import closing

import psycopg
import pytest
from hydra.errors import InstantiationException

from lazymem.agent.entry import compose
from lazymem.agent.errors import BadInput, IdempotencyConflict, StoreUnavailable
from lazymem.agent.sqlite_store import SQLiteStore
from lazymem.agent.store import Added, Idempotency, NewMessage, Readiness, Snapshot, open_store

from helpers import ROOT


def test_the_store_group_builds_each_store_with_its_keys(tmp_path, pg_dsn):
    lite = open_store(compose([f"agent.dir={tmp_path}", "agent.store.idempotency_ttl_s=60"]).agent.store)
    assert type(lite).__name__ == "SQLiteStore" and lite.idempotency_ttl_s == 60
    assert lite.path == tmp_path / "memory.sqlite"
    lite.close()
    overrides = ["agent/store=postgres", f"agent.store.dsn={pg_dsn}", "agent.store.wait_s=1.5"]
    pg = open_store(compose([*overrides, "agent.store.idempotency_ttl_s=60"]).agent.store)
    assert type(pg).__name__ == "PostgresStore" and pg.derived_in_store
    assert (pg.wait_s, pg.idempotency_ttl_s) == (1.5, 60)
    pg.close()


def test_a_store_that_fails_to_open_raises_its_own_error(tmp_path):
    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        nowhere = f"postgresql://lazymem@127.0.0.1:{s.getsockname()[1]}/db"
    down = compose(["agent/store=postgres", f"agent.store.dsn={nowhere}", "agent.store.wait_s=0.5"])
    with pytest.raises(StoreUnavailable, match="no connection within 0.5s"):
        open_store(down.agent.store)
    bad_key = compose([f"agent.dir={tmp_path}", "+agent.store.colour=red"])
    with pytest.raises(InstantiationException, match="colour"):  # the config's fault: Hydra's error
        open_store(bad_key.agent.store)


def test_the_contract_names_no_store():
    """store.py is what the stores import: an import of either from it would be a circle."""
    tree = ast.parse((ROOT / "lazymem" / "agent" / "store.py").read_text())
    imported = {node.module for node in ast.walk(tree) if isinstance(node, ast.ImportFrom) and node.module}
    assert not {m for m in imported if m.endswith(("sqlite_store", "postgres_store", "schema"))}


@pytest.fixture(params=["sqlite", "postgres"])
def open_any(request, tmp_path):
    """Opens a store of each kind with the given constructor keywords (closed after the test)."""
    opened = []

    def open_(**kwargs):
        if request.param == "postgres":
            from lazymem.agent.postgres_store import PostgresStore

            opened.append(PostgresStore(request.getfixturevalue("pg_dsn"), **kwargs))
        else:
            opened.append(SQLiteStore(tmp_path, **kwargs))
        return opened[-1]

    yield open_
    for store in opened:
        store.close()


@pytest.fixture
def any_store(open_any):
    return open_any()


def new(*texts: str) -> list[NewMessage]:
    return [NewMessage("user", t, "t", "s") for t in texts]


def keyed(text: str, source: str, *aliases: str) -> NewMessage:
    return NewMessage("user", text, "t", "s", source, aliases)


def key_rows(store) -> int:
    """The idempotency keys the store holds, all users."""
    if isinstance(store, SQLiteStore):
        with closing(sqlite3.connect(store.path)) as conn:
            return conn.execute("SELECT COUNT(*) FROM idempotency").fetchone()[0]
    with store.connection() as conn:
        return conn.execute("SELECT COUNT(*) FROM idempotency").fetchone()[0]


def test_a_snapshot_after_an_id_reads_only_newer_messages_with_the_generation(any_store):
    ids = any_store.add("t", "u", new("a", "b")).ids
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
    ids = any_store.add("t", "u", [NewMessage("user", t, "t", "s") for t in "abcde"]).ids
    pages, after = [], 0
    while page := any_store.snapshot("t", "u", after=after, limit=2).messages:
        pages.append([m.text for m in page])
        after = page[-1].id
    assert pages == [["a", "b"], ["c", "d"], ["e"]]
    assert any_store.snapshot("t", "u", limit=2).generation == any_store.snapshot("t", "u").generation
    assert [m.id for m in any_store.snapshot("t", "u", after=ids[1], limit=None).messages] == ids[2:]


def test_a_purge_names_each_users_deleted_messages_to_vector_keys_one_user_at_a_time(any_store):
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


def test_a_message_stored_under_one_of_its_aliases_is_not_stored_again(any_store):
    old = any_store.add("t", "u", [keyed("hello", "v1:1"), keyed("ok", "v1:2")])
    assert old == Added(old.ids, 2)
    any_store.finish(any_store.claim_pending(60))
    renamed = any_store.add("t", "u", [keyed("hello", "v2:1", "v1:1"), keyed("ok", "v2:2", "v1:0", "v1:2")])
    assert renamed == Added(old.ids, 0) and renamed.skipped == 2
    assert any_store.ready().backlog == 0  # nothing stored: nothing to index
    more = any_store.add("t", "u", [keyed("new", "v2:3", "v1:3"), keyed("new", "v2:3")])
    assert more.stored == 1 and more.ids[0] == more.ids[1]  # a source named twice in a batch: once
    assert any_store.add("t", "u", [keyed("new", "v3:3", "v2:3")]).ids == [more.ids[0]]
    assert [m.text for m in any_store.snapshot("t", "u").messages] == ["hello", "ok", "new"]
    assert any_store.add("t", "other", [keyed("hello", "v2:1", "v1:1")]).stored == 1  # per user


def test_a_source_names_one_message_and_an_alias_counts_only_for_the_same_text(any_store):
    first = any_store.add("t", "u", [keyed("hello", "s1")])
    with pytest.raises(BadInput, match="source 's1' is already stored for this user with another message"):
        any_store.add("t", "u", [keyed("fine", "s2"), keyed("CHANGED", "s1")])  # nothing of the batch
    with pytest.raises(BadInput, match="'s3'"):
        any_store.add("t", "u", [keyed("a", "s3"), keyed("b", "s3")])  # one source twice in a batch
    assert [m.text for m in any_store.snapshot("t", "u").messages] == ["hello"]
    # an old key (a file's name and line) met again by another file's line: another message, stored
    other = any_store.add("t", "u", [keyed("other file's line", "c1:x", "s1")])
    assert other.stored == 1 and other.ids != first.ids
    assert any_store.add("t", "u", [keyed("hello", "c1:y", "s1")]).ids == first.ids  # same text: the same


def test_an_idempotency_key_replays_the_first_add_and_writes_nothing(any_store):
    key = Idempotency("req-1", "digest-1")
    first = any_store.add("t", "u", new("a", "b"), key)
    assert first == Added([1, 2], 2)
    any_store.finish(any_store.claim_pending(60))
    generation = any_store.snapshot("t", "u").generation
    again = any_store.add("t", "u", new("a", "b"), key)
    assert again == Added([1, 2], 0, replayed=True) and again.skipped == 0
    assert [m.text for m in any_store.snapshot("t", "u").messages] == ["a", "b"]
    # no pending user, no new generation, no id taken from the tenant's counter
    assert any_store.ready().backlog == 0 and any_store.snapshot("t", "u").generation == generation
    assert any_store.add("t", "u", new("c")).ids == [3]
    # a key is the user's own
    assert any_store.add("t", "v", new("a", "b"), key).stored == 2
    assert any_store.add("t2", "u", new("a", "b"), key).stored == 2


def test_an_idempotency_key_sent_with_another_body_is_a_conflict_and_stores_nothing(any_store):
    any_store.add("t", "u", new("a"), Idempotency("req-1", "digest-1"))
    with pytest.raises(IdempotencyConflict, match="another request body") as caught:
        any_store.add("t", "u", new("the other body"), Idempotency("req-1", "digest-2"))
    assert "the other body" not in str(caught.value) and caught.value.status == 409
    assert [m.text for m in any_store.snapshot("t", "u").messages] == ["a"]


def test_an_expired_key_is_taken_anew_and_maintain_deletes_expired_keys(open_any):
    store = open_any(idempotency_ttl_s=0.5)
    store.add("t", "u", new("a"), Idempotency("k", "d1"))
    time.sleep(0.6)
    renewed = store.add("t", "u", new("b"), Idempotency("k", "d2"))  # the first is forgotten: no conflict
    assert renewed.stored == 1
    assert store.add("t", "u", new("b"), Idempotency("k", "d2")) == Added(renewed.ids, 0, replayed=True)
    store.add("t", "u", new("c"), Idempotency("k2", "d3"))
    store.maintain()
    assert key_rows(store) == 2  # neither has expired yet
    time.sleep(0.6)
    store.maintain()  # no deletion is pending: the expired keys go all the same
    assert key_rows(store) == 0
    assert [m.text for m in store.snapshot("t", "u").messages] == ["a", "b", "c"]


def test_forgetting_all_of_a_user_forgets_the_keys_and_other_deletions_keep_them(any_store):
    key = Idempotency("k", "d1")
    first = any_store.add("t", "u", new("a", "b"), key)
    any_store.forget("t", "u", [first.ids[0]])
    assert any_store.add("t", "u", new("a", "b"), key) == Added(first.ids, 0, replayed=True)
    assert any_store.purge("t", time.time() + 1) == {"u": 1}
    assert any_store.add("t", "u", new("a", "b"), key) == Added(first.ids, 0, replayed=True)
    any_store.add("t", "other", new("x"), key)
    any_store.forget("t", "u")
    again = any_store.add("t", "u", new("x"), Idempotency("k", "d2"))
    assert again.stored == 1 and not again.replayed
    with pytest.raises(IdempotencyConflict):  # another user's key stays
        any_store.add("t", "other", new("y"), Idempotency("k", "d2"))


def test_ready_counts_the_pending_users_and_ages_the_oldest_and_the_oldest_claim(any_store):
    assert any_store.ready() == Readiness(0, None, None)
    any_store.add("t", "a", new("1"))
    time.sleep(1.0)
    any_store.add("t", "b", new("2"))
    ready = any_store.ready()
    assert ready.backlog == 2 and ready.oldest_pending_s >= 1.0 and ready.oldest_claim_s is None
    claim = any_store.claim_pending(lease_s=60)
    assert claim.user == "a"
    time.sleep(0.2)
    any_store.add("t", "a", new("3"))  # added to while claimed: still pending after finish
    assert any_store.ready().oldest_claim_s >= 0.2
    any_store.finish(claim)
    ready = any_store.ready()
    # a is pending since its claim now, b since its add: both under a second ago
    assert ready.backlog == 2 and 0.2 <= ready.oldest_pending_s < 1.0 and ready.oldest_claim_s is None
    any_store.claim_pending(lease_s=0.1)
    time.sleep(0.2)
    assert any_store.ready().oldest_claim_s is None  # an expired claim is not a live one


# ---- tombstones: a forgotten message stays forgotten (store.tombstones)


def imported(*texts: str, prefix: str = "f") -> list[NewMessage]:
    """Messages as an import sends them: each with a key of its place."""
    return [NewMessage("user", t, "t0", "s", f"{prefix}:{n}") for n, t in enumerate(texts, 1)]


def texts(store, user: str = "u") -> list[str]:
    return [m.text for m in store.snapshot("t", user).messages]


def test_a_forgotten_message_is_not_stored_again_by_an_import_of_its_key(any_store):
    first = any_store.add("t", "u", imported("I live in Porto.", "My PIN is 4711.", "I like jazz."))
    assert first.stored == 3 and first.forgotten == 0
    assert any_store.forget("t", "u", [first.ids[1]]) == 1
    again = any_store.add("t", "u", imported("I live in Porto.", "My PIN is 4711.", "I like jazz."))
    assert (again.stored, again.skipped, again.forgotten) == (0, 2, 1)
    assert again.ids == [first.ids[0], None, first.ids[2]]
    assert texts(any_store) == ["I live in Porto.", "I like jazz."]
    # an alias counts with the same role and text only, as for a stored message
    alias = NewMessage("user", "My PIN is 4711.", "t0", "s", "c1:new", ("f:2",))
    other = NewMessage("user", "another text", "t0", "s", "c1:other", ("f:2",))
    assert (any_store.add("t", "u", [alias]).forgotten, any_store.add("t", "u", [other]).stored) == (1, 1)
    # a plain add names no key: the same words said again are a new message, not the forgotten one
    plain = any_store.add("t", "u", [NewMessage("user", "My PIN is 4711.", "t1", "s")])
    assert plain.stored == 1 and texts(any_store).count("My PIN is 4711.") == 1
    # and the other users of the tenant, and the same user in another tenant, are not concerned
    assert any_store.add("t", "v", imported("My PIN is 4711.")).stored == 1
    assert any_store.add("t2", "u", imported("My PIN is 4711.")).stored == 1


def test_forget_all_clears_the_users_digests(any_store):
    first = any_store.add("t", "u", imported("a", "b"))
    any_store.forget("t", "u", [first.ids[0]])
    assert any_store.add("t", "u", imported("a", "b")).forgotten == 1
    any_store.forget("t", "u")  # everything: the user starts afresh
    assert any_store.add("t", "u", imported("a", "b")).stored == 2 and texts(any_store) == ["a", "b"]


def test_a_purge_leaves_digests_too_and_a_retry_of_an_add_key_replays_its_ids(any_store):
    key = Idempotency("add-1", "digest")
    added = any_store.add("t", "u", imported("an old message"), key)
    assert any_store.purge("t", time.time() + 1) == {"u": 1}
    assert any_store.add("t", "u", imported("an old message")).forgotten == 1
    assert (
        any_store.add("t", "u", imported("an old message"), key).ids == added.ids
    )  # replayed: nothing stored
    assert any_store.snapshot("t", "u").messages == []


def test_every_stored_message_has_a_key_and_the_digests_hold_no_text(any_store, tmp_path, request):
    plain = any_store.add("t", "u", [NewMessage("user", "secret words", "t0", "s")] * 2)
    sources = [m.source for m in any_store.snapshot("t", "u").messages]
    assert all(s.startswith("m1:") for s in sources) and len(set(sources)) == 2
    any_store.forget("t", "u", [plain.ids[0]])
    digests = _digests(any_store, request, tmp_path)
    assert len(digests) == 2 and all(len(d) == 32 for d in digests)
    assert not any("secret" in d or sources[0] in d for d in digests)


def test_digests_expire_after_forgotten_ttl_s_when_one_is_set(open_any):
    store = open_any(forgotten_ttl_s=0.2)
    first = store.add("t", "u", imported("a"))
    store.add("t", "u", imported("b", prefix="g"))  # the user keeps a message
    store.forget("t", "u", first.ids)
    store.maintain()
    assert store.add("t", "u", imported("a")).forgotten == 1  # not yet expired
    time.sleep(0.3)
    store.maintain()
    assert store.add("t", "u", imported("a")).stored == 1


def _digests(store, request, tmp_path) -> list[str]:
    if isinstance(store, SQLiteStore):
        conn = sqlite3.connect(tmp_path / "memory.sqlite")
        rows = conn.execute("SELECT digest FROM forgotten").fetchall()
        conn.close()
    else:
        with psycopg.connect(request.getfixturevalue("pg_dsn")) as conn:
            rows = conn.execute("SELECT digest FROM forgotten").fetchall()
    return [d for (d,) in rows]
