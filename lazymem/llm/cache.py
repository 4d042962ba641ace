"""On-disk cache of successful LLM completions, in SQLite.

The key is the sha256 of canonical JSON (sorted keys, no whitespace) of everything that can change the
answer: model identity, decoding parameters, prompt template version, messages, response format and
sample index. The client builds that dict; :func:`cache_key` only hashes it, so a new component can
never be forgotten by the hashing code.

SQLite in WAL mode lets several processes read while one writes; ``busy_timeout`` makes a writer wait
for the lock instead of failing. Every write is one short transaction, so a process killed with
SIGKILL loses at most its last uncommitted row and the file stays readable. The connection is opened
lazily per process (a forked child reopens it) and guarded by a lock, so threads may share one cache.
"""

from __future__ import annotations

import hashlib
import json
import os
import sqlite3
import threading
import time
from pathlib import Path
from typing import Any

from lazymem import sqlite

TABLE = "completions"
_SCHEMA = f"""
CREATE TABLE IF NOT EXISTS {TABLE} (
    key TEXT PRIMARY KEY,
    model TEXT NOT NULL,
    value TEXT NOT NULL,
    created REAL NOT NULL
)
"""


def canonical_json(obj: Any) -> str:
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False)


def cache_key(parts: dict[str, Any]) -> str:
    """sha256 hex of the canonical JSON of ``parts``."""
    return hashlib.sha256(canonical_json(parts).encode("utf-8")).hexdigest()


class LLMCache:
    """A key -> JSON-object store with hit/miss counters. Thread-safe; safe across processes."""

    def __init__(self, path: str | Path, busy_timeout_s: float = 60.0):
        self.path = Path(path)
        self.busy_timeout_s = busy_timeout_s
        self.hits = 0
        self.misses = 0
        self.writes = 0
        self._lock = threading.Lock()
        self._conn: sqlite3.Connection | None = None
        self._pid = -1

    def _connect(self) -> sqlite3.Connection:
        if self._conn is not None and self._pid == os.getpid():
            return self._conn
        conn = sqlite.connect(self.path, self.busy_timeout_s, _SCHEMA, thread_safe=True)
        self._conn, self._pid = conn, os.getpid()
        return conn

    def get(self, key: str) -> dict[str, Any] | None:
        with self._lock:
            row = self._connect().execute("SELECT value FROM completions WHERE key = ?", (key,)).fetchone()
            if row is None:
                self.misses += 1
                return None
            self.hits += 1
            return json.loads(row[0])

    def put(self, key: str, value: dict[str, Any], model: str = "") -> None:
        with self._lock:
            self._connect().execute(
                "INSERT OR REPLACE INTO completions (key, model, value, created) VALUES (?, ?, ?, ?)",
                (key, model, canonical_json(value), time.time()),
            )
            self.writes += 1

    def __len__(self) -> int:
        with self._lock:
            return self._connect().execute("SELECT COUNT(*) FROM completions").fetchone()[0]

    def stats(self) -> dict[str, int]:
        return {"hits": self.hits, "misses": self.misses, "writes": self.writes}

    def summary(self) -> dict[str, dict]:
        """Per served model name: entries, bytes of stored replies, oldest and newest (unix time)."""
        with self._lock:
            return sqlite.summarize(self._connect(), TABLE, "value")

    def prune(self, before: float | None = None, model: str | None = None, apply: bool = False) -> dict:
        """Replies per model written before `before` and/or of models matching the glob `model`; deleted
        only with `apply` (see lazymem.sqlite.prune)."""
        with self._lock:
            return sqlite.prune(self._connect(), TABLE, before, model, apply)

    def close(self) -> None:
        with self._lock:
            if self._conn is not None and self._pid == os.getpid():
                self._conn.close()
            self._conn = None
