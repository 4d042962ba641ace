"""On-disk cache of message embeddings: SQLite in WAL mode, one row per (model, text).

The key is the model identity plus sha256 of the exact string fed to the encoder, so a change of
template, prompt or model never reuses a stale vector. `created` (unix time of the first write) lets
task=cache prune by age; files from before it existed get the time they were first reopened. Each
`put` is one transaction, so a run killed mid-way keeps every batch it finished; WAL plus a busy
timeout lets several processes read and write the same file (writers queue, readers never block).
Within a process one connection serves every thread, one call at a time (the agent service indexes in a
worker thread and scores windows on its event loop).
"""

from __future__ import annotations

import hashlib
import os
import sqlite3
import threading
import time
from collections.abc import Collection, Mapping, Sequence
from pathlib import Path

import numpy as np

from lazymem import sqlite

TABLE = "embeddings"
_SCHEMA = f"""
CREATE TABLE IF NOT EXISTS {TABLE} (
    model   TEXT NOT NULL,
    key     TEXT NOT NULL,
    dim     INTEGER NOT NULL,
    vec     BLOB NOT NULL,
    created REAL,
    PRIMARY KEY (model, key)
) WITHOUT ROWID
"""
_SQL_VARS = 500  # keys per SELECT ... IN (...), below SQLite's bound-parameter limit


def text_key(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


class EmbeddingCache:
    """Float32 vectors by (model identity, sha256 of text). `hits`/`misses` count `get` lookups."""

    def __init__(self, dir: str | os.PathLike, filename: str = "embeddings.sqlite", timeout_s: float = 60.0):
        self.path = Path(dir) / filename
        self.timeout_s = timeout_s
        self.hits = 0
        self.misses = 0
        self._conn: sqlite3.Connection | None = None
        self._pid: int | None = None
        self._lock = threading.RLock()

    def _connection(self) -> sqlite3.Connection:
        # A connection must not cross a fork: reopen in a child process. Callers hold self._lock.
        if self._conn is None or self._pid != os.getpid():
            conn = sqlite.connect(self.path, self.timeout_s, _SCHEMA, thread_safe=True)
            _add_created(conn)
            self._conn, self._pid = conn, os.getpid()
        return self._conn

    def get(self, model: str, keys: Sequence[str]) -> dict[str, np.ndarray]:
        """The cached vectors among `keys` (missing keys are simply absent)."""
        with self._lock:
            return self._get(model, keys)

    def _get(self, model: str, keys: Sequence[str]) -> dict[str, np.ndarray]:
        conn = self._connection()
        found: dict[str, np.ndarray] = {}
        unique = list(dict.fromkeys(keys))
        for start in range(0, len(unique), _SQL_VARS):
            chunk = unique[start : start + _SQL_VARS]
            marks = ",".join("?" * len(chunk))
            rows = conn.execute(
                f"SELECT key, dim, vec FROM embeddings WHERE model = ? AND key IN ({marks})", [model, *chunk]
            )
            for key, dim, blob in rows:
                vec = np.frombuffer(blob, dtype=np.float32)
                if vec.shape[0] == dim:  # a torn row would fail this; treat it as a miss
                    found[key] = vec
        self.hits += len(found)
        self.misses += len(unique) - len(found)
        return found

    def put(self, model: str, items: dict[str, np.ndarray]) -> None:
        """Store one batch atomically. Rows already present (e.g. from another process) are kept."""
        if not items:
            return
        rows, now = [], time.time()
        for key, vec in items.items():
            arr = np.ascontiguousarray(vec, dtype=np.float32).ravel()
            rows.append((model, key, arr.shape[0], arr.tobytes(), now))
        with self._lock, sqlite.transaction(self._connection()) as conn:
            conn.executemany(
                "INSERT OR IGNORE INTO embeddings (model, key, dim, vec, created) VALUES (?, ?, ?, ?, ?)",
                rows,
            )

    def keep_only(self, dropped: Mapping[str, Collection[str]]) -> None:
        """Delete the vectors of every model not in `dropped`, and the keys `dropped` names of the others
        (what was derived from deleted messages), leaving no copy in the file: deleted pages are zeroed
        (secure_delete) and the WAL is checkpointed and truncated."""
        with self._lock:
            conn = self._connection()
            conn.execute("PRAGMA secure_delete = ON")
            with sqlite.transaction(conn):
                models = sorted(dropped)
                marks = ",".join("?" * len(models))
                conn.execute(f"DELETE FROM embeddings WHERE model NOT IN ({marks})", models)
                conn.executemany(
                    "DELETE FROM embeddings WHERE model = ? AND key = ?",
                    [(model, key) for model in models for key in dropped[model]],
                )
            conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")

    def count(self, model: str | None = None) -> int:
        with self._lock:
            conn = self._connection()
            if model is None:
                return conn.execute("SELECT COUNT(*) FROM embeddings").fetchone()[0]
            return conn.execute("SELECT COUNT(*) FROM embeddings WHERE model = ?", (model,)).fetchone()[0]

    def summary(self) -> dict[str, dict]:
        """Per model identity: entries, bytes of vectors, oldest and newest (unix time)."""
        with self._lock:
            return sqlite.summarize(self._connection(), TABLE, "vec")

    def prune(self, before: float | None = None, model: str | None = None, apply: bool = False) -> dict:
        """Vectors per model written before `before` and/or of model identities matching the glob `model`;
        deleted only with `apply` (see lazymem.sqlite.prune)."""
        with self._lock:
            return sqlite.prune(self._connection(), TABLE, before, model, apply)

    def close(self) -> None:
        with self._lock:
            if self._conn is not None and self._pid == os.getpid():
                self._conn.close()
            self._conn = None

    def __getstate__(self) -> dict:
        # Picklable for Ray / multiprocessing: the connection is reopened on first use, the lock remade.
        state = dict(self.__dict__)
        state["_conn"], state["_pid"], state["_lock"] = None, None, None
        return state

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)
        self._lock = threading.RLock()


def _add_created(conn: sqlite3.Connection) -> None:
    """Gives a cache file written before `created` existed the column, its rows dated now."""
    if "created" in {row[1] for row in conn.execute(f"PRAGMA table_info({TABLE})")}:
        return
    with sqlite.transaction(conn):  # another process may be adding it at the same moment
        if "created" not in {row[1] for row in conn.execute(f"PRAGMA table_info({TABLE})")}:
            conn.execute(f"ALTER TABLE {TABLE} ADD COLUMN created REAL")
            conn.execute(f"UPDATE {TABLE} SET created = ?", (time.time(),))
