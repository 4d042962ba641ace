"""A user's blocks of derived data (vector blocks, BM25 state) in a SQLite file of the user's own folder.

The embedded store keeps derived data in each user's folder, which lazymem.agent deletes whole with the
user's messages; `LocalBlocks` is the `blocks` table of lazymem/agent/schema.py in such a folder
(`blocks.sqlite`). The file belongs to one user, so its rows leave tenant and user empty, and there is no
generation to check: a forget of all the user's messages deletes the folder, and a partial one rewrites
the blocks while no query of the user is open.

Each call opens the file and closes it again: the protocol has no close, and a connection left open would
keep a deleted folder's file alive. Overwritten and deleted blocks are zeroed in the file (secure_delete),
and the last connection to close folds the WAL back into it and deletes it.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Collection, Iterator, Mapping
from contextlib import closing, contextmanager
from pathlib import Path

from lazymem import sqlite
from lazymem.agent.schema import SQLITE, blocks_table

# The owner columns of a file that holds one user's blocks
_OWNER = ("", "")
_WHERE = "tenant = ? AND user_id = ? AND kind = ? AND name = ?"
_SQL_VARS = 500  # block numbers per statement, below SQLite's bound-parameter limit


class LocalBlocks:
    """`lazymem.retrieval.per_user.Blocks` in the SQLite file `path` (made when first opened)."""

    def __init__(self, path: Path, timeout_s: float = 60.0):
        self.path, self.timeout_s = Path(path), timeout_s

    def read(self, kind: str, name: str, numbers: Collection[int] | None = None) -> dict[int, bytes]:
        owner = (*_OWNER, kind, name)
        if not self.path.exists():  # nothing written yet: a read makes no file
            return {}
        with self._connection() as conn:
            if numbers is None:
                rows = conn.execute(f"SELECT block, data FROM blocks WHERE {_WHERE}", owner).fetchall()
            else:
                wanted, rows = sorted(set(numbers)), []
                for start in range(0, len(wanted), _SQL_VARS):
                    chunk = wanted[start : start + _SQL_VARS]
                    rows += conn.execute(
                        f"SELECT block, data FROM blocks WHERE {_WHERE} "
                        f"AND block IN ({','.join('?' * len(chunk))})",
                        (*owner, *chunk),
                    ).fetchall()
        return {number: bytes(data) for number, data in rows}

    def write(self, kind: str, name: str, blocks: Mapping[int, bytes | None], replace: bool = False) -> bool:
        """In one transaction: a None value deletes its block, `replace` deletes every block not given.
        Always True: nothing here is bound to a generation."""
        owner = (*_OWNER, kind, name)
        with self._connection() as conn, sqlite.transaction(conn):
            if replace:
                conn.execute(f"DELETE FROM blocks WHERE {_WHERE}", owner)
            conn.executemany(
                f"DELETE FROM blocks WHERE {_WHERE} AND block = ?",
                [(*owner, n) for n, data in blocks.items() if data is None],
            )
            conn.executemany(
                "INSERT OR REPLACE INTO blocks (tenant, user_id, kind, name, block, data) "
                "VALUES (?, ?, ?, ?, ?, ?)",
                [(*owner, n, data) for n, data in blocks.items() if data is not None],
            )
        return True

    def last(self, kind: str, name: str) -> tuple[int, int] | None:
        """The highest block number of (kind, name) and that block's size in bytes; None when it has none.
        (SQLite's length() of a blob reads no overflow page of it.)"""
        if not self.path.exists():
            return None
        with self._connection() as conn:
            row = conn.execute(
                f"SELECT block, length(data) FROM blocks WHERE {_WHERE} ORDER BY block DESC LIMIT 1",
                (*_OWNER, kind, name),
            ).fetchone()
        return None if row is None else (row[0], row[1])

    def keep_kinds(self, kinds: Collection[str]) -> None:
        """Delete every block whose kind is not in `kinds` (zeroed in the file, as any deleted block)."""
        if not self.path.exists():
            return
        with self._connection() as conn:
            wanted = sorted(kinds)
            conn.execute(f"DELETE FROM blocks WHERE kind NOT IN ({','.join('?' * len(wanted))})", wanted)

    def names(self, kind: str) -> list[str]:
        """Every name that holds blocks of `kind`, sorted."""
        if not self.path.exists():
            return []
        with self._connection() as conn:
            rows = conn.execute(
                "SELECT DISTINCT name FROM blocks WHERE tenant = ? AND user_id = ? AND kind = ? "
                "ORDER BY name",
                (*_OWNER, kind),
            ).fetchall()
        return [name for (name,) in rows]

    @contextmanager
    def _connection(self) -> Iterator[sqlite3.Connection]:
        with closing(sqlite.connect(self.path, self.timeout_s, blocks_table(SQLITE, if_absent=True))) as conn:
            conn.execute("PRAGMA secure_delete = ON")
            yield conn
