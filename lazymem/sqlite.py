"""Opening the on-disk caches (LLM replies, embeddings): SQLite in WAL mode, safe across processes."""

from __future__ import annotations

import sqlite3
import time
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
