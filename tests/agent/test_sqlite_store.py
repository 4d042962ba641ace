"""The SQLite store's schema (lazymem/agent/sqlite_store.py): per-tenant ids, and the migration of a
version-1 file (one id counter for all tenants) that keeps every id a client holds."""

from __future__ import annotations

import sqlite3

import pytest

from lazymem.agent.sqlite_store import VERSION, SQLiteStore
from lazymem.agent.store import NewMessage

V1_SCHEMA = """
CREATE TABLE messages (
    id INTEGER PRIMARY KEY AUTOINCREMENT, tenant TEXT NOT NULL, user TEXT NOT NULL,
    session_id TEXT NOT NULL, time TEXT NOT NULL, role TEXT NOT NULL, text TEXT NOT NULL, added REAL NOT NULL
)
"""


def new(text: str, source: str | None = None) -> NewMessage:
    return NewMessage("user", text, "2025-01-01", "s1", source)


def test_each_tenant_counts_its_own_ids(tmp_path):
    store = SQLiteStore(tmp_path)
    assert store.add("a", "u", [new("a1"), new("a2")]) == [1, 2]
    assert store.add("b", "u", [new("b1")]) == [1]
    assert store.add("a", "w", [new("a3")]) == [3]
    assert store.forget("b", "u", [1]) == 1
    assert [m.text for m in store.snapshot("a", "u").messages] == ["a1", "a2"]  # same id, other tenant
    store.close()


def test_a_version_1_file_keeps_its_ids(tmp_path):
    conn = sqlite3.connect(tmp_path / "memory.sqlite")
    conn.execute(V1_SCHEMA)
    rows = [("a", "u", "a1"), ("b", "v", "b1"), ("a", "u", "a2"), ("b", "v", "b2"), ("a", "w", "a3")]
    for tenant, user, text in rows:
        conn.execute(
            "INSERT INTO messages (tenant, user, session_id, time, role, text, added) VALUES (?,?,?,?,?,?,0)",
            (tenant, user, "s", "t", "user", text),
        )
    conn.commit()
    conn.close()

    store = SQLiteStore(tmp_path)
    assert [(m.id, m.text) for m in store.snapshot("a", "u").messages] == [(1, "a1"), (3, "a2")]
    assert [m.id for m in store.snapshot("b", "v").messages] == [2, 4]
    assert store.add("a", "u", [new("a4")]) == [6]  # after tenant a's largest id
    assert store.add("b", "v", [new("b3")]) == [5]  # after tenant b's own
    assert store.forget("a", "u", [3]) == 1
    generations = store.generations([("a", "u"), ("a", "w"), ("b", "v"), ("b", "nobody")])
    assert set(generations) == {("a", "u"), ("a", "w"), ("b", "v")}
    store.close()

    reopened = SQLiteStore(tmp_path)  # migrated once: a second open changes nothing
    assert [m.id for m in reopened.snapshot("a", "u").messages] == [1, 6]
    reopened.close()
    conn = sqlite3.connect(tmp_path / "memory.sqlite")
    assert conn.execute("SELECT version FROM schema_version").fetchall() == [(VERSION,)]
    tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    assert "messages_v1" not in tables
    conn.execute("UPDATE schema_version SET version = ?", (VERSION + 1,))
    conn.commit()
    conn.close()
    with pytest.raises(RuntimeError, match="schema version"):
        SQLiteStore(tmp_path)


def test_a_source_is_stored_once_per_user(tmp_path):
    store = SQLiteStore(tmp_path)
    first = store.add("t", "u", [new("ok", "f:1"), new("ok", "f:2")])
    again = store.add("t", "u", [new("ok", "f:2"), new("fine", "f:3")])
    assert again[0] == first[1] and [m.text for m in store.snapshot("t", "u").messages] == [
        "ok",
        "ok",
        "fine",
    ]
    store.add("t", "other", [new("ok", "f:1")])
    assert len(store.snapshot("t", "other").messages) == 1  # a source is per user
    store.close()
