"""The SQLite store (lazymem/agent/sqlite_store.py): atomic adds under kill -9, writers in several processes
and threads at once, forget and purge that leave no deleted text in any file, per-tenant ids, the
migration of a version-2 file (before idempotency keys and blocks) and the refusal of a newer one, an add
of a key that waits for another process's add of it, and a write lock held too long that is
StoreUnavailable, not an error of the store."""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import textwrap
import threading
import time

import pytest

from lazymem.agent import store_sql
from lazymem.agent.errors import StoreUnavailable
from lazymem.agent.schema import VERSION
from lazymem.agent.sqlite_store import SQLiteStore
from lazymem.agent.store import Added, Idempotency, NewMessage, UnknownMessages

from agent_helpers import files_containing


def batch(*texts: str) -> list[NewMessage]:
    return [NewMessage("user", t, "2025-01-01", "s") for t in texts]


def test_add_forget_purge(tmp_path):
    store = SQLiteStore(tmp_path)
    ids = store.add("t", "u", batch("a", "b", "c")).ids
    store.add("t2", "u", batch("other tenant"))
    assert [m.text for m in store.snapshot("t", "u").messages] == ["a", "b", "c"]
    with pytest.raises(UnknownMessages):
        store.forget("t", "u", [ids[0], 10**9])
    assert len(store.snapshot("t", "u").messages) == 3
    assert store.forget("t", "u", [ids[1]]) == 1
    assert [m.id for m in store.snapshot("t", "u").messages] == [ids[0], ids[2]]
    assert store.purge("t", time.time() + 1) == {"u": 2}
    assert store.snapshot("t", "u").messages == [] and len(store.snapshot("t2", "u").messages) == 1
    store.close()


def test_deleted_text_is_in_no_file(tmp_path):
    store = SQLiteStore(tmp_path)
    store.add("t", "u", batch(*[f"filler {i} " * 20 for i in range(50)]))
    ids = store.add("t", "u", batch("CANARY-store-4242")).ids
    assert files_containing(b"CANARY-store-4242", tmp_path)
    store.forget("t", "u", ids)
    assert files_containing(b"CANARY-store-4242", tmp_path) == []
    store.close()


_WRITER = """
import sys
from lazymem.agent.sqlite_store import SQLiteStore
from lazymem.agent.store import NewMessage
store = SQLiteStore(sys.argv[1])
k = 0
while True:
    store.add("t", "u", [NewMessage("user", f"batch {k} item {i}", "now", "s") for i in range(200)])
    print(k, flush=True)
    k += 1
"""


def test_kill_9_during_adds_leaves_every_batch_whole_or_absent(tmp_path):
    proc = subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(_WRITER), str(tmp_path)], stdout=subprocess.PIPE
    )
    for _ in range(5):  # a few batches committed, then killed in the middle of later ones
        proc.stdout.readline()
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    conn = sqlite3.connect(tmp_path / "memory.sqlite")
    assert conn.execute("PRAGMA integrity_check").fetchone() == ("ok",)
    conn.close()
    texts = [m.text for m in SQLiteStore(tmp_path).snapshot("t", "u").messages]
    batches = {}
    for t in texts:
        k = int(t.split()[1])
        batches[k] = batches.get(k, 0) + 1
    assert len(batches) >= 5 and set(batches.values()) == {200}
    assert sorted(batches) == list(range(len(batches)))


def test_threads_and_processes_write_at_once_without_lock_errors(tmp_path):
    script = (
        "import sys\nfrom lazymem.agent.sqlite_store import SQLiteStore\n"
        "from lazymem.agent.store import NewMessage\ns = SQLiteStore(sys.argv[1])\n"
    )
    script += "for k in range(100): s.add('t', 'proc', [NewMessage('user', f'p{k}', 'now', 's')])\n"
    other = subprocess.Popen([sys.executable, "-c", script, str(tmp_path)])
    store, errors = SQLiteStore(tmp_path), []

    def writer(u: int) -> None:
        try:
            for k in range(50):
                store.add("t", f"user{u}", batch(f"{u}-{k}"))
                store.snapshot("t", f"user{u}")
        except Exception as e:  # noqa: BLE001 - the assertion below shows it
            errors.append(e)

    threads = [threading.Thread(target=writer, args=(u,)) for u in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert other.wait(120) == 0 and errors == []
    assert all(len(store.snapshot("t", f"user{u}").messages) == 50 for u in range(8))
    assert [m.text for m in store.snapshot("t", "proc").messages] == [f"p{k}" for k in range(100)]


def new(text: str, source: str | None = None) -> NewMessage:
    return NewMessage("user", text, "2025-01-01", "s1", source)


def test_each_tenant_counts_its_own_ids(tmp_path):
    store = SQLiteStore(tmp_path)
    assert store.add("a", "u", [new("a1"), new("a2")]) == Added([1, 2], 2)
    assert store.add("b", "u", [new("b1")]).ids == [1]
    assert store.add("a", "w", [new("a3")]).ids == [3]
    assert store.forget("b", "u", [1]) == 1
    assert [m.text for m in store.snapshot("a", "u").messages] == ["a1", "a2"]  # same id, other tenant
    store.close()


def test_a_file_of_a_newer_version_is_refused(tmp_path):
    SQLiteStore(tmp_path).close()
    reopened = SQLiteStore(tmp_path)  # migrated once: a second open changes nothing
    reopened.close()
    conn = sqlite3.connect(tmp_path / "memory.sqlite")
    assert conn.execute("SELECT version FROM schema_version").fetchall() == [(VERSION,)]
    conn.execute("UPDATE schema_version SET version = ?", (VERSION + 1,))
    conn.commit()
    conn.close()
    with pytest.raises(RuntimeError, match="schema version"):
        SQLiteStore(tmp_path)


def test_a_source_is_stored_once_per_user(tmp_path):
    store = SQLiteStore(tmp_path)
    first = store.add("t", "u", [new("ok", "f:1"), new("ok", "f:2")]).ids
    again = store.add("t", "u", [new("ok", "f:2"), new("fine", "f:3")])
    assert again.ids[0] == first[1] and again.stored == again.skipped == 1
    assert [m.text for m in store.snapshot("t", "u").messages] == [
        "ok",
        "ok",
        "fine",
    ]
    twice = store.add("t", "u", [new("again", "f:9"), new("again", "f:9")])
    assert twice.ids[0] == twice.ids[1] and twice.stored == 1 and len(store.snapshot("t", "u").messages) == 4
    store.add("t", "other", [new("ok", "f:1")])
    assert len(store.snapshot("t", "other").messages) == 1  # a source is per user
    store.close()


# Version 2's schema, as lazymem wrote it before idempotency keys
V2_SCHEMA = [
    """CREATE TABLE schema_version (version INTEGER NOT NULL)""",
    """CREATE TABLE messages (
        tenant     TEXT NOT NULL,
        user_id    TEXT NOT NULL,
        id         INTEGER NOT NULL,
        session_id TEXT NOT NULL,
        time       TEXT NOT NULL,
        role       TEXT NOT NULL,
        text       TEXT NOT NULL,
        added      REAL NOT NULL,
        source     TEXT,
        PRIMARY KEY (tenant, id)
    )""",
    "CREATE INDEX messages_by_user ON messages (tenant, user_id, id)",
    "CREATE UNIQUE INDEX messages_by_source ON messages (tenant, user_id, source) WHERE source IS NOT NULL",
    "CREATE TABLE tenant_ids (tenant TEXT PRIMARY KEY, last_id INTEGER NOT NULL)",
    "CREATE TABLE generations "
    "(tenant TEXT, user_id TEXT, generation INTEGER NOT NULL, PRIMARY KEY (tenant, user_id))",
    "CREATE TABLE counters (name TEXT PRIMARY KEY, value INTEGER NOT NULL)",
    "CREATE TABLE pending (tenant TEXT, user_id TEXT, mark INTEGER NOT NULL, "
    "claimed_until REAL NOT NULL DEFAULT 0, PRIMARY KEY (tenant, user_id))",
    "INSERT INTO schema_version VALUES (2)",
    "INSERT INTO counters VALUES ('generation', 2)",
    # one add: a message imported from f:1, its tenant's counter, its generation, its user pending
    "INSERT INTO messages VALUES ('t', 'u', 7, 's1', '2025-01-01', 'user', 'from version 2', 100.0, 'f:1')",
    "INSERT INTO tenant_ids VALUES ('t', 7)",
    "INSERT INTO generations VALUES ('t', 'u', 1)",
    "INSERT INTO pending (tenant, user_id, mark) VALUES ('t', 'u', 2)",
]


def test_a_version_2_file_is_migrated_with_its_messages_ids_and_sources(tmp_path):
    conn = sqlite3.connect(tmp_path / "memory.sqlite")
    for statement in V2_SCHEMA:
        conn.execute(statement)
    conn.commit()
    conn.close()

    store = SQLiteStore(tmp_path)
    assert [(m.id, m.text) for m in store.snapshot("t", "u").messages] == [(7, "from version 2")]
    ready = store.ready()  # pending since the upgrade
    assert ready.backlog == 1 and ready.oldest_pending_s < 5
    assert store.add("t", "u", [new("from version 2", "f:1")]) == Added([7], 0)
    renamed = NewMessage("user", "from version 2", "t", "s", "v3:1", ("f:1",))
    assert store.add("t", "u", [renamed]) == Added([7], 0)
    key = Idempotency("k", "d")
    added = store.add("t", "u", [new("next")], key)
    assert added.stored == 1 and added.ids[0] > 7  # the tenant's counter goes on
    assert store.add("t", "u", [new("next")], key) == Added(added.ids, 0, replayed=True)
    store.close()
    conn = sqlite3.connect(tmp_path / "memory.sqlite")
    assert conn.execute("SELECT version FROM schema_version").fetchall() == [(VERSION,)] == [(5,)]
    assert conn.execute("SELECT COUNT(*) FROM blocks").fetchone() == (0,)  # version 4's table
    conn.close()


def test_a_second_add_of_a_key_waits_for_the_first_and_replays_its_ids(tmp_path, monkeypatch):
    """Two processes' connections to one file: the second add of a key waits for the first's write lock,
    then finds the key and replays, storing nothing."""
    first_store, second_store = SQLiteStore(tmp_path), SQLiteStore(tmp_path)
    inside, release = threading.Event(), threading.Event()
    reserve = store_sql.reserve_ids

    def held(*args):  # the first add holds its transaction open here
        inside.set()
        release.wait(10)
        return reserve(*args)

    monkeypatch.setattr(store_sql, "reserve_ids", held)
    key, results = Idempotency("k", "d"), {}

    def add(name: str, store: SQLiteStore) -> None:
        results[name] = store.add("t", "u", batch("a", "b"), key)

    first = threading.Thread(target=add, args=("first", first_store))
    first.start()
    assert inside.wait(10)
    second = threading.Thread(target=add, args=("second", second_store))
    second.start()
    second.join(0.5)
    assert second.is_alive()  # waiting for the first's transaction
    release.set()
    first.join(10)
    second.join(10)
    assert results["first"] == Added([1, 2], 2)
    assert results["second"] == Added([1, 2], 0, replayed=True)
    assert [m.text for m in first_store.snapshot("t", "u").messages] == ["a", "b"]
    first_store.close()
    second_store.close()


def test_a_write_lock_held_past_the_busy_timeout_is_store_unavailable(tmp_path):
    store = SQLiteStore(tmp_path, timeout_s=0.3)
    other = sqlite3.connect(tmp_path / "memory.sqlite", isolation_level=None)
    other.execute("BEGIN IMMEDIATE")  # another process in the middle of a long write
    started = time.monotonic()
    with pytest.raises(StoreUnavailable, match="write lock") as caught:
        store.add("t", "u", batch("a"))
    assert time.monotonic() - started < 2 and caught.value.status == 503
    other.execute("ROLLBACK")
    other.close()
    assert store.add("t", "u", batch("a")).stored == 1
    store.close()
