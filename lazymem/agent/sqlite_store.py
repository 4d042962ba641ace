"""The embedded store: every tenant's users in one SQLite file, `memory.sqlite`.

WAL mode lets readers run beside a writer; each add is one `BEGIN IMMEDIATE` transaction, so a process
killed mid-add leaves the batch whole or absent. Deletion is meant to be final: `secure_delete` zeroes
deleted rows inside the file, and after a forget or purge the WAL (which still holds the pages as they were
written) is checkpointed and truncated to zero bytes. Derived data lives in files of the user's own folder
(`Derived.storage.dir`), which lazymem.agent deletes whole with the user's messages.

The schema and its versions are lazymem/agent/schema.py's, and the statements both stores run alike
lazymem/agent/store_sql.py's. The file's `blocks` table stays empty: derived data is the user folder's
(lazymem/agent/local_blocks.py keeps the same table there).

A writer in another process that holds the file's write lock longer than the busy timeout makes a call
fail with StoreUnavailable.
"""

from __future__ import annotations

import json
import sqlite3
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from lazymem import sqlite
from lazymem.agent import store_sql
from lazymem.agent.config_block import Block
from lazymem.agent.errors import IdempotencyConflict, StoreUnavailable
from lazymem.agent.schema import (
    INSERT_COLUMNS,
    MESSAGE_COLUMNS,
    SQLITE,
    check_known,
)
from lazymem.agent.store import (
    Added,
    Claim,
    Derived,
    Idempotency,
    NewMessage,
    Readiness,
    Snapshot,
    StoredMessage,
    VectorKeys,
    already_stored,
    new_key,
    tombstone_checks,
    tombstones,
)
from lazymem.agent.user_retrieval import LocalUserStorage
from lazymem.llm.cache import LLMCache

_SQL_VARS = 500  # ids per DELETE ... IN (...), below SQLite's bound-parameter limit


class SQLiteStore:
    """`Store` in one SQLite file. One connection behind a lock: safe from any thread of the process,
    and other processes on the same file wait for the write lock (busy timeout) instead of failing."""

    derived_in_store = False  # derived data: files in each user's folder

    def __init__(
        self,
        dir: str | Path,
        filename: str = "memory.sqlite",
        timeout_s: float = 60.0,
        idempotency_ttl_s: float = 86400.0,
        forgotten_ttl_s: float | None = None,
    ):
        self.path = Path(dir) / filename
        self.timeout_s, self.idempotency_ttl_s = timeout_s, idempotency_ttl_s
        self.forgotten_ttl_s = forgotten_ttl_s
        self._lock = threading.Lock()
        self._conn = sqlite.connect(self.path, timeout_s, store_sql.VERSION_TABLE, thread_safe=True)
        self._conn.execute("PRAGMA secure_delete = ON")
        with self._transaction() as conn:
            store_sql.migrate(conn, SQLITE, "memory.sqlite")

    @staticmethod
    def check_keys(keys: Block) -> dict[str, Any]:
        """`agent.store`'s values for this store, checked at start-up (lazymem/agent/settings.py)."""
        return {
            "idempotency_ttl_s": keys.seconds("idempotency_ttl_s"),
            "forgotten_ttl_s": keys.seconds("forgotten_ttl_s", nullable=True),
            "dir": keys.text("dir"),
        }

    def add(
        self, tenant: str, user: str, messages: Sequence[NewMessage], idempotency: Idempotency | None = None
    ) -> Added:
        """Another process's add of the same idempotency key holds the write lock until it commits: this
        one waits for it (busy timeout), then replays its ids."""
        now = time.time()
        with self._lock, self._transaction() as conn:
            if idempotency is not None:
                earlier = self._remembered(conn, tenant, user, idempotency, now)
                if earlier is not None:
                    return Added(earlier, 0, replayed=True)
            first = store_sql.reserve_ids(conn, SQLITE, tenant, len(messages))
            ids: list[int | None] = []
            stored = forgotten = 0
            for n, m in enumerate(messages):
                known = _stored_source(conn, tenant, user, m)
                if known is not None:
                    ids.append(known)
                    continue
                if _was_forgotten(conn, tenant, user, m):
                    ids.append(None)
                    forgotten += 1
                    continue
                source = m.source or new_key()
                conn.execute(
                    f"INSERT INTO messages ({INSERT_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                    (tenant, user, first + n, m.session_id, m.time, m.role, m.text, now, source),
                )
                ids.append(first + n)
                stored += 1
            if stored:
                conn.execute(
                    "INSERT INTO generations (tenant, user_id, generation) VALUES (?, ?, ?) "
                    "ON CONFLICT (tenant, user_id) DO NOTHING",
                    (tenant, user, _next_generation(conn)),
                )
                conn.execute(  # pending since its first add not yet indexed
                    "INSERT INTO pending (tenant, user_id, mark, since) VALUES (?, ?, ?, ?) "
                    "ON CONFLICT (tenant, user_id) DO UPDATE SET mark = excluded.mark",
                    (tenant, user, _next_generation(conn), now),
                )
            if idempotency is not None:  # new, or in place of an expired one
                conn.execute(
                    "INSERT OR REPLACE INTO idempotency (tenant, user_id, key, digest, ids, created) "
                    "VALUES (?, ?, ?, ?, ?, ?)",
                    (tenant, user, idempotency.key, idempotency.digest, _compact(ids), now),
                )
        return Added(ids, stored, forgotten=forgotten)

    def ready(self) -> Readiness:
        now = time.time()
        with self._lock:
            backlog, since, claimed = self._conn.execute(
                "SELECT COUNT(*), MIN(since), MIN(CASE WHEN claimed_until > ? THEN claimed_at END) "
                "FROM pending",
                (now,),
            ).fetchone()
        return Readiness(backlog, _age(now, since), _age(now, claimed))

    def claim_pending(self, lease_s: float) -> Claim | None:
        now = time.time()
        with self._lock, self._transaction() as conn:
            row = conn.execute(
                "UPDATE pending SET claimed_until = ?, claimed_at = ? WHERE rowid = (SELECT rowid "
                "FROM pending WHERE claimed_until < ? ORDER BY mark LIMIT 1) RETURNING tenant, user_id, mark",
                (now + lease_s, now, now),
            ).fetchone()
        return None if row is None else Claim(*row)

    def finish(self, claim: Claim) -> None:
        with self._lock, self._transaction() as conn:
            store_sql.finish(conn, SQLITE, claim)

    def users(self, after: tuple[str, str] | None = None, limit: int = 1000) -> list[tuple[str, str]]:
        with self._lock:
            return store_sql.users(self._conn, SQLITE, after, limit)

    def mark_pending(self, users: Sequence[tuple[str, str]]) -> int:
        now, marked = time.time(), 0
        with self._lock, self._transaction() as conn:
            for tenant, user in users:
                if (
                    _generation(conn, tenant, user) is None
                    or conn.execute(
                        "SELECT 1 FROM pending WHERE tenant = ? AND user_id = ?", (tenant, user)
                    ).fetchone()
                ):
                    continue
                conn.execute(
                    "INSERT INTO pending (tenant, user_id, mark, since) VALUES (?, ?, ?, ?)",
                    (tenant, user, _next_generation(conn), now),
                )
                marked += 1
        return marked

    def snapshot(self, tenant: str, user: str, after: int = 0, limit: int | None = None) -> Snapshot:
        with self._lock, self._transaction("BEGIN") as conn:
            rows = conn.execute(
                f"SELECT {MESSAGE_COLUMNS} FROM messages "
                "WHERE tenant = ? AND user_id = ? AND id > ? ORDER BY id LIMIT ?",
                (tenant, user, after, -1 if limit is None else limit),  # LIMIT -1: no limit
            ).fetchall()
            generation = _generation(conn, tenant, user)
        return Snapshot(generation if rows or after else None, [StoredMessage(*row) for row in rows])

    def unreachable(self) -> str | None:
        """A local file is never known to be unreachable ahead of a call."""
        return None

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
            with self._transaction() as conn:
                if ids is None:
                    deleted = store_sql.delete_user(conn, SQLITE, tenant, user)
                else:
                    gone = self._delete_ids(conn, tenant, user, sorted(set(ids)))
                    deleted = len(gone)
                    _leave_tombstones(conn, tenant, user, gone)
                    if vector_keys is not None:
                        vector_keys(user, gone)
                _renew_generation(conn, tenant, user)
            self._truncate_wal()
        return deleted

    def purge(self, tenant: str, before: float, vector_keys: VectorKeys | None = None) -> dict[str, int]:
        """The users' idempotency keys stay until they expire."""
        with self._lock:
            with self._transaction() as conn:
                counts = {}
                for user in store_sql.users_before(conn, SQLITE, tenant, before):  # one user's rows at a time
                    gone = store_sql.delete_before(conn, SQLITE, tenant, user, before)
                    _leave_tombstones(conn, tenant, user, gone)
                    if vector_keys is not None:
                        vector_keys(user, gone)
                    _renew_generation(conn, tenant, user)
                    counts[user] = len(gone)
            if counts:
                self._truncate_wal()
        return counts

    def maintain(self) -> None:
        """Delete the expired idempotency keys and tombstones; deletions need nothing more: secure_delete
        and the truncated WAL already leave no deleted text in the files."""
        with self._lock, self._transaction() as conn:
            expired = time.time() - self.idempotency_ttl_s
            conn.execute("DELETE FROM idempotency WHERE created <= ?", (expired,))
            if self.forgotten_ttl_s is not None:
                conn.execute(
                    "DELETE FROM forgotten WHERE created <= ?", (time.time() - self.forgotten_ttl_s,)
                )

    def derived(self, tenant: str, user: str, dir: Path, generation: int) -> Derived:
        return Derived(LocalUserStorage(dir), lambda: LLMCache(dir / "llm.sqlite"))

    def close(self) -> None:
        with self._lock:
            self._conn.close()

    def _remembered(
        self, conn: sqlite3.Connection, tenant: str, user: str, idempotency: Idempotency, now: float
    ) -> list[int] | None:
        """The ids of the earlier add of this idempotency key, if it is still remembered; None if not."""
        row = conn.execute(
            "SELECT digest, ids FROM idempotency "
            "WHERE tenant = ? AND user_id = ? AND key = ? AND created > ?",
            (tenant, user, idempotency.key, now - self.idempotency_ttl_s),
        ).fetchone()
        if row is None:
            return None
        if row[0] != idempotency.digest:
            raise IdempotencyConflict(
                "this idempotency key was already used for this user with another request body; "
                "nothing was stored"
            )
        return json.loads(row[1])

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
        check_known(ids, (row[0] for row in mine))
        for start in range(0, len(ids), _SQL_VARS):
            chunk = ids[start : start + _SQL_VARS]
            marks = ",".join("?" * len(chunk))
            conn.execute(f"DELETE FROM messages WHERE tenant = ? AND id IN ({marks})", [tenant, *chunk])
        return [StoredMessage(*row) for row in mine]

    def _truncate_wal(self) -> None:
        """Leave no deleted page in the WAL, waiting up to the busy timeout for readers of the file."""
        sqlite.truncate_wal(self._conn, self.timeout_s)

    @contextmanager
    def _transaction(self, begin: str = "BEGIN IMMEDIATE") -> Iterator[sqlite3.Connection]:
        """A transaction on the store's connection (lazymem.sqlite.transaction). The write lock still held
        by another process after the busy timeout is StoreUnavailable."""
        try:
            with sqlite.transaction(self._conn, begin) as conn:
                yield conn
        except sqlite3.OperationalError as e:
            if "locked" not in str(e):
                raise
            raise StoreUnavailable(
                f"{self.path}: another process held the write lock for over {self.timeout_s:g}s ({e})"
            ) from e


def _stored_source(conn: sqlite3.Connection, tenant: str, user: str, m: NewMessage) -> int | None:
    """The id of the user's message that m is (store.already_stored), looked up under its source and its
    aliases (an earlier import stored its key as the source)."""
    keys = m.keys
    if not keys:
        return None
    rows = conn.execute(
        "SELECT source, id, role, text FROM messages WHERE tenant = ? AND user_id = ? "
        f"AND source IN ({','.join('?' * len(keys))})",
        (tenant, user, *keys),
    ).fetchall()
    return already_stored(m, {source: tuple(rest) for source, *rest in rows})


def _was_forgotten(conn: sqlite3.Connection, tenant: str, user: str, m: NewMessage) -> bool:
    """Whether a deletion left a tombstone of `m`'s key (store.tombstone_checks)."""
    digests = tombstone_checks(m)
    if not digests:
        return False
    row = conn.execute(
        "SELECT 1 FROM forgotten WHERE tenant = ? AND user_id = ? "
        f"AND digest IN ({','.join('?' * len(digests))}) LIMIT 1",
        (tenant, user, *digests),
    ).fetchone()
    return row is not None


def _leave_tombstones(
    conn: sqlite3.Connection, tenant: str, user: str, gone: Sequence[StoredMessage]
) -> None:
    now = time.time()
    conn.executemany(
        "INSERT OR IGNORE INTO forgotten (tenant, user_id, digest, created) VALUES (?, ?, ?, ?)",
        [(tenant, user, digest, now) for m in gone for digest in tombstones(m)],
    )


def _compact(ids: list[int | None]) -> str:
    return json.dumps(ids, separators=(",", ":"))


def _age(now: float, since: float | None) -> float | None:
    return None if since is None else max(0.0, now - since)


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
    """After a deletion: a new generation, or none once the user has no message left (store_sql.settle)."""
    if store_sql.settle(conn, SQLITE, tenant, user):
        conn.execute(
            "UPDATE generations SET generation = ? WHERE tenant = ? AND user_id = ?",
            (_next_generation(conn), tenant, user),
        )
