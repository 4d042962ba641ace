"""The embedded store: every tenant's users in one SQLite file, `memory.sqlite`.

WAL mode lets readers run beside a writer; each add is one `BEGIN IMMEDIATE` transaction, so a process
killed mid-add leaves the batch whole or absent. Deletion is meant to be final: `secure_delete` zeroes
deleted rows inside the file, and after a forget or purge the WAL (which still holds the pages as they were
written) is checkpointed and truncated to zero bytes. Derived data lives in files of the user's own folder
(`Derived.storage.dir`), which lazymem.agent deletes whole with the user's messages.

Schema versions: 1 (before versions were recorded) numbered every message from one counter shared by all
tenants; 2 numbers each tenant's messages on its own. The migration keeps every id a client already holds
and continues each tenant's counter after its largest id.
"""

from __future__ import annotations

import sqlite3
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

from lazymem import sqlite
from lazymem.agent.store import (
    MESSAGE_COLUMNS,
    Claim,
    Derived,
    NewMessage,
    Snapshot,
    StoredMessage,
    UnknownMessages,
    VectorKeys,
)
from lazymem.llm.cache import LLMCache
from lazymem.retrieval.base import UserStorage

VERSION = 2
_VERSION_TABLE = "CREATE TABLE IF NOT EXISTS schema_version (version INTEGER NOT NULL)"
_TABLES = [
    """CREATE TABLE IF NOT EXISTS messages (
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
    "CREATE INDEX IF NOT EXISTS messages_by_user ON messages (tenant, user_id, id)",
    "CREATE UNIQUE INDEX IF NOT EXISTS messages_by_source ON messages (tenant, user_id, source) "
    "WHERE source IS NOT NULL",
    "CREATE TABLE IF NOT EXISTS tenant_ids (tenant TEXT PRIMARY KEY, last_id INTEGER NOT NULL)",
    "CREATE TABLE IF NOT EXISTS generations "
    "(tenant TEXT, user_id TEXT, generation INTEGER NOT NULL, PRIMARY KEY (tenant, user_id))",
    "CREATE TABLE IF NOT EXISTS counters (name TEXT PRIMARY KEY, value INTEGER NOT NULL)",
    "CREATE TABLE IF NOT EXISTS pending (tenant TEXT, user_id TEXT, mark INTEGER NOT NULL, "
    "claimed_until REAL NOT NULL DEFAULT 0, PRIMARY KEY (tenant, user_id))",
]
_SQL_VARS = 500  # ids per DELETE ... IN (...), below SQLite's bound-parameter limit


class SQLiteStore:
    """`Store` in one SQLite file. One connection behind a lock: safe from any thread of the process,
    and other processes on the same file wait for the write lock (busy timeout) instead of failing."""

    derived_in_store = False  # derived data: files in each user's folder

    def __init__(self, dir: str | Path, filename: str = "memory.sqlite", timeout_s: float = 60.0):
        self.path = Path(dir) / filename
        self.timeout_s = timeout_s
        self._lock = threading.Lock()
        self._conn = sqlite.connect(self.path, timeout_s, _VERSION_TABLE, thread_safe=True)
        self._conn.execute("PRAGMA secure_delete = ON")
        with _transaction(self._conn) as conn:
            _migrate(conn)

    def add(self, tenant: str, user: str, messages: Sequence[NewMessage]) -> list[int]:
        now = time.time()
        with self._lock, _transaction(self._conn) as conn:
            first = _reserve_ids(conn, tenant, len(messages))
            ids = []
            for n, m in enumerate(messages):
                known = _stored_source(conn, tenant, user, m.source)
                if known is not None:
                    ids.append(known)
                    continue
                conn.execute(
                    "INSERT INTO messages (tenant, user_id, id, session_id, time, role, text, added, source) "
                    "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                    (tenant, user, first + n, m.session_id, m.time, m.role, m.text, now, m.source),
                )
                ids.append(first + n)
            conn.execute(
                "INSERT INTO generations (tenant, user_id, generation) VALUES (?, ?, ?) "
                "ON CONFLICT (tenant, user_id) DO NOTHING",
                (tenant, user, _next_generation(conn)),
            )
            conn.execute(
                "INSERT INTO pending (tenant, user_id, mark) VALUES (?, ?, ?) "
                "ON CONFLICT (tenant, user_id) DO UPDATE SET mark = excluded.mark",
                (tenant, user, _next_generation(conn)),
            )
        return ids

    def claim_pending(self, lease_s: float) -> Claim | None:
        now = time.time()
        with self._lock, _transaction(self._conn) as conn:
            row = conn.execute(
                "UPDATE pending SET claimed_until = ? WHERE rowid = (SELECT rowid FROM pending "
                "WHERE claimed_until < ? ORDER BY mark LIMIT 1) RETURNING tenant, user_id, mark",
                (now + lease_s, now),
            ).fetchone()
        return None if row is None else Claim(*row)

    def finish(self, claim: Claim) -> None:
        with self._lock, _transaction(self._conn) as conn:
            conn.execute(
                "DELETE FROM pending WHERE tenant = ? AND user_id = ? AND mark = ?",
                (claim.tenant, claim.user, claim.mark),
            )
            conn.execute(  # added to since the claim: pending again, for whoever comes next
                "UPDATE pending SET claimed_until = 0 WHERE tenant = ? AND user_id = ?",
                (claim.tenant, claim.user),
            )

    def snapshot(self, tenant: str, user: str, after: int = 0, limit: int | None = None) -> Snapshot:
        with self._lock, _transaction(self._conn, "BEGIN") as conn:
            rows = conn.execute(
                f"SELECT {MESSAGE_COLUMNS} FROM messages "
                "WHERE tenant = ? AND user_id = ? AND id > ? ORDER BY id LIMIT ?",
                (tenant, user, after, -1 if limit is None else limit),  # LIMIT -1: no limit
            ).fetchall()
            generation = _generation(conn, tenant, user)
        return Snapshot(generation if rows or after else None, [StoredMessage(*row) for row in rows])

    def generations(self, users: Sequence[tuple[str, str]]) -> dict[tuple[str, str], int]:
        with self._lock:
            found = {user: _generation(self._conn, *user) for user in users}
        return {user: g for user, g in found.items() if g is not None}

    def forget(
        self, tenant: str, user: str, ids: Sequence[int] | None = None, vector_keys: VectorKeys | None = None
    ) -> int:
        """The user's derived data is the agent's user folder, not this file: `vector_keys` is called
        with the deleted messages so that the caller can trim that folder."""
        with self._lock:
            with _transaction(self._conn) as conn:
                if ids is None:
                    deleted = conn.execute(
                        "DELETE FROM messages WHERE tenant = ? AND user_id = ?", (tenant, user)
                    ).rowcount
                else:
                    gone = self._delete_ids(conn, tenant, user, sorted(set(ids)))
                    deleted = len(gone)
                    if vector_keys is not None:
                        vector_keys(user, gone)
                _renew_generation(conn, tenant, user)
            self._truncate_wal()
        return deleted

    def purge(self, tenant: str, before: float, vector_keys: VectorKeys | None = None) -> dict[str, int]:
        with self._lock:
            with _transaction(self._conn) as conn:
                users = [
                    row[0]
                    for row in conn.execute(
                        "SELECT DISTINCT user_id FROM messages WHERE tenant = ? AND added < ?",
                        (tenant, before),
                    ).fetchall()
                ]
                counts = {}
                for user in users:  # user by user: one user's deleted rows in memory at a time
                    where = "WHERE tenant = ? AND user_id = ? AND added < ?"
                    gone = [
                        StoredMessage(*row)
                        for row in conn.execute(
                            f"SELECT {MESSAGE_COLUMNS} FROM messages {where} ORDER BY id",
                            (tenant, user, before),
                        ).fetchall()
                    ]
                    conn.execute(f"DELETE FROM messages {where}", (tenant, user, before))
                    if vector_keys is not None:
                        vector_keys(user, gone)
                    _renew_generation(conn, tenant, user)
                    counts[user] = len(gone)
            if counts:
                self._truncate_wal()
        return counts

    def maintain(self) -> None:
        """Nothing to do: secure_delete and the truncated WAL already leave no deleted text in the files."""

    def derived(self, tenant: str, user: str, dir: Path, generation: int) -> Derived:
        return Derived(UserStorage(dir), lambda: LLMCache(dir / "llm.sqlite"))

    def close(self) -> None:
        with self._lock:
            self._conn.close()

    def _delete_ids(
        self, conn: sqlite3.Connection, tenant: str, user: str, ids: list[int]
    ) -> list[StoredMessage]:
        """Delete the user's messages `ids` (all of them, or UnknownMessages); the deleted messages."""
        mine = []
        for start in range(0, len(ids), _SQL_VARS):
            chunk = ids[start : start + _SQL_VARS]
            marks = ",".join("?" * len(chunk))
            mine += conn.execute(
                f"SELECT {MESSAGE_COLUMNS} FROM messages "
                f"WHERE tenant = ? AND user_id = ? AND id IN ({marks})",
                [tenant, user, *chunk],
            ).fetchall()
        missing = sorted(set(ids) - {row[0] for row in mine})
        if missing:
            raise UnknownMessages(missing)
        for start in range(0, len(ids), _SQL_VARS):
            chunk = ids[start : start + _SQL_VARS]
            marks = ",".join("?" * len(chunk))
            conn.execute(f"DELETE FROM messages WHERE tenant = ? AND id IN ({marks})", [tenant, *chunk])
        return [StoredMessage(*row) for row in mine]

    def _truncate_wal(self) -> None:
        """Move the WAL into the file and cut it to zero bytes; another process reading the file can hold
        the checkpoint back for a moment, so wait for it (up to the busy timeout)."""
        deadline = time.monotonic() + self.timeout_s
        while True:
            busy, _, _ = self._conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()
            if not busy:
                return
            if time.monotonic() > deadline:
                raise TimeoutError(f"{self.path}: could not truncate the WAL within {self.timeout_s:g}s")
            time.sleep(0.05)


def _migrate(conn: sqlite3.Connection) -> None:
    """Create the schema, or bring a version-1 file (one id counter for all tenants) to version 2."""
    tables = {row[0] for row in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    row = conn.execute("SELECT version FROM schema_version").fetchone()
    if row is not None:
        if row[0] > VERSION:
            raise RuntimeError(f"memory.sqlite has schema version {row[0]}; this lazymem knows {VERSION}")
        return
    legacy = "messages" in tables
    if legacy:
        conn.execute("ALTER TABLE messages RENAME TO messages_v1")
        conn.execute("DROP INDEX IF EXISTS messages_by_user")
    for statement in _TABLES:
        conn.execute(statement)
    conn.execute("INSERT INTO counters (name, value) VALUES ('generation', 0)")
    if legacy:
        conn.execute(
            "INSERT INTO messages (tenant, user_id, id, session_id, time, role, text, added) "
            "SELECT tenant, user, id, session_id, time, role, text, added FROM messages_v1"
        )
        conn.execute("INSERT INTO tenant_ids SELECT tenant, MAX(id) FROM messages GROUP BY tenant")
        for tenant, user in conn.execute("SELECT DISTINCT tenant, user_id FROM messages").fetchall():
            conn.execute("INSERT INTO generations VALUES (?, ?, ?)", (tenant, user, _next_generation(conn)))
        conn.execute("DROP TABLE messages_v1")  # secure_delete zeroes its pages
    conn.execute("INSERT INTO schema_version (version) VALUES (?)", (VERSION,))


def _reserve_ids(conn: sqlite3.Connection, tenant: str, n: int) -> int:
    """The first of `n` consecutive ids of the tenant's own counter."""
    (last,) = conn.execute(
        "INSERT INTO tenant_ids (tenant, last_id) VALUES (?, ?) "
        "ON CONFLICT (tenant) DO UPDATE SET last_id = last_id + excluded.last_id RETURNING last_id",
        (tenant, n),
    ).fetchone()
    return last - n + 1


def _stored_source(conn: sqlite3.Connection, tenant: str, user: str, source: str | None) -> int | None:
    if source is None:
        return None
    row = conn.execute(
        "SELECT id FROM messages WHERE tenant = ? AND user_id = ? AND source = ?", (tenant, user, source)
    ).fetchone()
    return None if row is None else row[0]


def _next_generation(conn: sqlite3.Connection) -> int:
    (value,) = conn.execute(
        "UPDATE counters SET value = value + 1 WHERE name = 'generation' RETURNING value"
    ).fetchone()
    return value


def _generation(conn: sqlite3.Connection, tenant: str, user: str) -> int | None:
    row = conn.execute(
        "SELECT generation FROM generations WHERE tenant = ? AND user_id = ?", (tenant, user)
    ).fetchone()
    return None if row is None else row[0]


def _renew_generation(conn: sqlite3.Connection, tenant: str, user: str) -> None:
    """After a deletion: a new generation, or none once the user has no message left (no row keeps
    the id of a forgotten user)."""
    left = conn.execute(
        "SELECT 1 FROM messages WHERE tenant = ? AND user_id = ? LIMIT 1", (tenant, user)
    ).fetchone()
    if left is None:
        conn.execute("DELETE FROM generations WHERE tenant = ? AND user_id = ?", (tenant, user))
        conn.execute("DELETE FROM pending WHERE tenant = ? AND user_id = ?", (tenant, user))
    else:
        conn.execute(
            "UPDATE generations SET generation = ? WHERE tenant = ? AND user_id = ?",
            (_next_generation(conn), tenant, user),
        )


@contextmanager
def _transaction(conn: sqlite3.Connection, begin: str = "BEGIN IMMEDIATE") -> Iterator[sqlite3.Connection]:
    """`BEGIN IMMEDIATE` (take the write lock up front) ... COMMIT, or ROLLBACK on any error."""
    conn.execute(begin)
    try:
        yield conn
    except BaseException:
        conn.execute("ROLLBACK")
        raise
    conn.execute("COMMIT")
