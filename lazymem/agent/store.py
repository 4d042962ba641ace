"""Where an agent's raw messages live: one small storage interface and its SQLite implementation.

`Store` is all the rest of lazymem.agent asks of storage, so a server database (for several service
replicas) can be added beside `SQLiteStore` without touching the Memory API or the service.

`SQLiteStore` keeps every tenant's users in one file, `memory.sqlite`. WAL mode lets readers run beside
a writer; each add is one `BEGIN IMMEDIATE` transaction, so a process killed mid-add leaves the batch
whole or absent. Deletion is meant to be final: `secure_delete` zeroes deleted rows inside the file, and
after a forget or purge the WAL (which still holds the pages as they were written) is checkpointed and
truncated to zero bytes.
"""

from __future__ import annotations

import sqlite3
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Protocol

from lazymem import sqlite

_SCHEMA = """
CREATE TABLE IF NOT EXISTS messages (
    id         INTEGER PRIMARY KEY AUTOINCREMENT,
    tenant     TEXT NOT NULL,
    user       TEXT NOT NULL,
    session_id TEXT NOT NULL,
    time       TEXT NOT NULL,
    role       TEXT NOT NULL,
    text       TEXT NOT NULL,
    added      REAL NOT NULL
)
"""
_INDEX = "CREATE INDEX IF NOT EXISTS messages_by_user ON messages (tenant, user, id)"
_SQL_VARS = 500  # ids per DELETE ... IN (...), below SQLite's bound-parameter limit


class UnknownUser(KeyError):
    """The user has no stored messages (never added, or everything forgotten)."""

    def __str__(self) -> str:
        return f"unknown user {self.args[0]!r}: no stored messages"


class UnknownMessages(KeyError):
    """Some message ids to forget are not this user's; nothing was deleted."""

    def __str__(self) -> str:
        return f"message ids {self.args[0]} are not stored for this user; nothing was deleted"


@dataclass(frozen=True)
class NewMessage:
    role: str
    text: str
    time: str
    session_id: str


@dataclass(frozen=True)
class StoredMessage:
    id: int
    session_id: str
    time: str
    role: str
    text: str
    added: float  # unix time it was stored: what retention counts from

    def to_dict(self) -> dict:
        return asdict(self)


class Store(Protocol):
    """Raw messages per (tenant, user), in the order they were added."""

    def add(self, tenant: str, user: str, messages: Sequence[NewMessage]) -> list[int]:
        """Store a batch atomically; its ids, in order."""
        ...

    def messages(self, tenant: str, user: str) -> list[StoredMessage]:
        """Every stored message of the user, oldest first (empty for an unknown user)."""
        ...

    def forget(self, tenant: str, user: str, ids: Sequence[int] | None = None) -> int:
        """Delete the given messages (all of them, or UnknownMessages), or every message of the user."""
        ...

    def purge(self, tenant: str, before: float) -> dict[str, int]:
        """Delete the tenant's messages added before `before` (unix time); deletions per user."""
        ...

    def close(self) -> None: ...


class SQLiteStore:
    """`Store` in one SQLite file. One connection behind a lock: safe from any thread of the process,
    and other processes on the same file wait for the write lock (busy timeout) instead of failing."""

    def __init__(self, dir: str | Path, filename: str = "memory.sqlite", timeout_s: float = 60.0):
        self.path = Path(dir) / filename
        self.timeout_s = timeout_s
        self._lock = threading.Lock()
        self._conn = sqlite.connect(self.path, timeout_s, _SCHEMA, thread_safe=True)
        self._conn.execute(_INDEX)
        self._conn.execute("PRAGMA secure_delete = ON")

    def add(self, tenant: str, user: str, messages: Sequence[NewMessage]) -> list[int]:
        now = time.time()
        rows = [(tenant, user, m.session_id, m.time, m.role, m.text, now) for m in messages]
        with self._lock, _transaction(self._conn) as conn:
            ids = []
            for row in rows:
                cur = conn.execute(
                    "INSERT INTO messages (tenant, user, session_id, time, role, text, added) "
                    "VALUES (?, ?, ?, ?, ?, ?, ?)",
                    row,
                )
                ids.append(cur.lastrowid)
        return ids

    def messages(self, tenant: str, user: str) -> list[StoredMessage]:
        with self._lock:
            rows = self._conn.execute(
                "SELECT id, session_id, time, role, text, added FROM messages "
                "WHERE tenant = ? AND user = ? ORDER BY id",
                (tenant, user),
            ).fetchall()
        return [StoredMessage(*row) for row in rows]

    def forget(self, tenant: str, user: str, ids: Sequence[int] | None = None) -> int:
        with self._lock:
            with _transaction(self._conn) as conn:
                if ids is None:
                    deleted = conn.execute(
                        "DELETE FROM messages WHERE tenant = ? AND user = ?", (tenant, user)
                    ).rowcount
                else:
                    deleted = self._delete_ids(conn, tenant, user, sorted(set(ids)))
            self._truncate_wal()
        return deleted

    def purge(self, tenant: str, before: float) -> dict[str, int]:
        with self._lock:
            with _transaction(self._conn) as conn:
                counts = dict(
                    conn.execute(
                        "SELECT user, COUNT(*) FROM messages WHERE tenant = ? AND added < ? GROUP BY user",
                        (tenant, before),
                    )
                )
                conn.execute("DELETE FROM messages WHERE tenant = ? AND added < ?", (tenant, before))
            if counts:
                self._truncate_wal()
        return counts

    def close(self) -> None:
        with self._lock:
            self._conn.close()

    def _delete_ids(self, conn: sqlite3.Connection, tenant: str, user: str, ids: list[int]) -> int:
        mine = set()
        for start in range(0, len(ids), _SQL_VARS):
            chunk = ids[start : start + _SQL_VARS]
            marks = ",".join("?" * len(chunk))
            mine.update(
                row[0]
                for row in conn.execute(
                    f"SELECT id FROM messages WHERE tenant = ? AND user = ? AND id IN ({marks})",
                    [tenant, user, *chunk],
                )
            )
        missing = [i for i in ids if i not in mine]
        if missing:
            raise UnknownMessages(missing)
        for start in range(0, len(ids), _SQL_VARS):
            chunk = ids[start : start + _SQL_VARS]
            conn.execute(f"DELETE FROM messages WHERE id IN ({','.join('?' * len(chunk))})", chunk)
        return len(ids)

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


@contextmanager
def _transaction(conn: sqlite3.Connection) -> Iterator[sqlite3.Connection]:
    """`BEGIN IMMEDIATE` (take the write lock up front) ... COMMIT, or ROLLBACK on any error."""
    conn.execute("BEGIN IMMEDIATE")
    try:
        yield conn
    except BaseException:
        conn.execute("ROLLBACK")
        raise
    conn.execute("COMMIT")
