"""SQLite as the package uses it (the LLM and embedding caches, the agent's store): files in WAL mode, safe
across processes, and one way to write a transaction."""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


def connect(path: Path, timeout_s: float, schema: str, thread_safe: bool = False) -> sqlite3.Connection:
    """An autocommit connection in WAL mode with a busy timeout, the schema created.

    Switching a new file to WAL takes an exclusive lock that SQLite's busy handler does not wait for,
    so two processes creating the same cache at once would see "database is locked": retry that step.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    conn = sqlite3.connect(path, timeout=timeout_s, isolation_level=None, check_same_thread=not thread_safe)
    conn.execute(f"PRAGMA busy_timeout = {int(timeout_s * 1000)}")
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            conn.execute("PRAGMA journal_mode = WAL")
            break
        except sqlite3.OperationalError as e:
            if "locked" not in str(e) or time.monotonic() > deadline:
                raise
            time.sleep(0.05)
    conn.execute("PRAGMA synchronous = NORMAL")  # WAL + NORMAL: consistent after a process is killed
    conn.execute(schema)
    return conn


@contextmanager
def transaction(conn: sqlite3.Connection, begin: str = "BEGIN IMMEDIATE") -> Iterator[sqlite3.Connection]:
    """`begin` ... COMMIT on an autocommit connection, or ROLLBACK on any error (a failed COMMIT too).

    `BEGIN IMMEDIATE` takes the write lock up front, waiting for it up to the busy timeout: a transaction
    that starts reading and later writes could deadlock on the lock upgrade with another writer. A
    transaction that only reads passes `begin="BEGIN"`, for one snapshot of several statements."""
    conn.execute(begin)
    try:
        yield conn
        conn.execute("COMMIT")
    except BaseException:
        if conn.in_transaction:  # a COMMIT that SQLite failed may have rolled back already
            conn.execute("ROLLBACK")
        raise


def truncate_wal(conn: sqlite3.Connection, timeout_s: float) -> None:
    """Move the WAL into the file and cut it to zero bytes, so that it keeps no copy of deleted pages;
    another process reading the file can hold the checkpoint back for a moment, so wait for it (TimeoutError
    after `timeout_s`)."""
    deadline = time.monotonic() + timeout_s
    while True:
        busy, _, _ = conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()
        if not busy:
            return
        if time.monotonic() > deadline:
            file = conn.execute("PRAGMA database_list").fetchone()[2]
            raise TimeoutError(f"{file}: could not truncate the WAL within {timeout_s:g}s")
        time.sleep(0.05)


def tables_of(path: Path) -> set[str]:
    """The table names of an existing SQLite file, read without creating or changing anything."""
    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        return {row[0] for row in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    finally:
        conn.close()


def summarize(conn: sqlite3.Connection, table: str, payload: str) -> dict[str, dict]:
    """Per model of a cache table with `model` and `created` columns: entries, payload bytes, and the
    oldest and newest entry (unix time)."""
    rows = conn.execute(
        f"SELECT model, COUNT(*), SUM(LENGTH({payload})), MIN(created), MAX(created) FROM {table} "
        "GROUP BY model ORDER BY model"
    )
    return {m: {"entries": n, "bytes": b, "oldest": lo, "newest": hi} for m, n, b, lo, hi in rows}


def prune(
    conn: sqlite3.Connection, table: str, before: float | None, model: str | None, apply: bool
) -> dict[str, int]:
    """Entries per model written before `before` (unix time) and/or whose model matches the glob `model`
    (SQLite GLOB: * and ?, case-sensitive); deleted only with `apply`, the file then compacted."""
    if before is None and model is None:
        raise ValueError("prune needs an age or a model")
    clauses, args = [], []
    if before is not None:
        clauses.append("created < ?")
        args.append(before)
    if model is not None:
        clauses.append("model GLOB ?")
        args.append(model)
    where = " AND ".join(clauses)
    counts = dict(conn.execute(f"SELECT model, COUNT(*) FROM {table} WHERE {where} GROUP BY model", args))
    if apply and counts:
        conn.execute(f"DELETE FROM {table} WHERE {where}", args)
        conn.execute("VACUUM")
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    return counts
