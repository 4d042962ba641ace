"""A user's derived data as rows of the server database (tables `derived` and `blocks` of schema.py).

Three views of the same user's rows: the retrievers' embedding cache (`RowsUserStorage.embedding_cache`),
their numbered blobs (`RowsBlocks`: vector blocks, BM25 state) and the memory model's response cache
(`RowsLLMCache`). Each is bound to the generation the user had when it was opened; a write under an older
generation is dropped, so a query that started before a forget (on this replica or another) cannot store
anything derived from the forgotten messages after it. `drop_derived` is the deletion's side: it runs in
the forget's or the purge's transaction.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Collection, Mapping
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Any

from psycopg import Connection

from lazymem.agent import vector_blocks
from lazymem.agent.user_retrieval import LocalUserStorage
from lazymem.llm.cache import canonical_json

# The kind of the `derived` rows: the memory model's replies
LLM_REPLY = "llm"


class DerivedRows:
    """The `derived` rows of one (tenant, user) at one generation. `connection`: the store's (a pooled
    connection in a transaction; StoreUnavailable when the database cannot be reached)."""

    def __init__(
        self,
        connection: Callable[[], AbstractContextManager[Connection]],
        tenant: str,
        user: str,
        generation: int,
    ):
        self.connection, self.tenant, self.user, self.generation = connection, tenant, user, generation
        self.dropped = 0  # writes refused because the generation had moved on

    def get(self, kind: str, model: str, keys: list[str]) -> dict[str, bytes]:
        with self.connection() as conn:
            rows = conn.execute(
                "SELECT key, value FROM derived WHERE tenant = %s AND user_id = %s AND kind = %s "
                "AND model = %s AND key = ANY(%s)",
                (self.tenant, self.user, kind, model, keys),
            ).fetchall()
        return {key: bytes(value) for key, value in rows}

    def put(self, kind: str, model: str, items: dict[str, bytes]) -> bool:
        """Store `items` unless the user's generation moved on since these rows were opened."""
        with self.connection() as conn:
            if not self.current(conn):
                return False
            now = time.time()
            with conn.cursor() as cur:
                cur.executemany(
                    "INSERT INTO derived (tenant, user_id, kind, model, key, value, created) "
                    "VALUES (%s, %s, %s, %s, %s, %s, %s) ON CONFLICT DO NOTHING",
                    [(self.tenant, self.user, kind, model, k, v, now) for k, v in items.items()],
                )
        return True

    def current(self, conn: Connection, alone: bool = False) -> bool:
        """Whether the user still has this generation, its row share-locked until `conn` commits (a forget
        locks it first, so none deletes under a write; `alone`: locked for update, so no other write of
        the user's derived data runs beside this one); counts a refused write in `dropped`."""
        row = conn.execute(
            "SELECT generation FROM generations WHERE tenant = %s AND user_id = %s "
            + ("FOR UPDATE" if alone else "FOR SHARE"),
            (self.tenant, self.user),
        ).fetchone()
        if row is None or row[0] != self.generation:
            self.dropped += 1
            return False
        return True


class RowsBlocks:
    """`lazymem.retrieval.per_user.Blocks` over the user's `blocks` rows, bound to the generation of
    `rows`: a write under another generation writes nothing and returns False."""

    def __init__(self, rows: DerivedRows):
        self.rows = rows

    def read(self, kind: str, name: str, numbers: Collection[int] | None = None) -> dict[int, bytes]:
        where = "tenant = %s AND user_id = %s AND kind = %s AND name = %s"
        args: list[Any] = [self.rows.tenant, self.rows.user, kind, name]
        if numbers is not None:
            where += " AND block = ANY(%s)"
            args.append(list(numbers))
        with self.rows.connection() as conn:  # binary: bytea as text is hex, 4x slower to move and parse
            found = conn.execute(
                f"SELECT block, data FROM blocks WHERE {where}", args, binary=True
            ).fetchall()
        return {number: bytes(data) for number, data in found}

    def write(self, kind: str, name: str, blocks: Mapping[int, bytes | None], replace: bool = False) -> bool:
        """In one transaction: a None value deletes its block, `replace` deletes every block not given."""
        owner = (self.rows.tenant, self.rows.user, kind, name)
        kept = [n for n, data in blocks.items() if data is not None]
        with self.rows.connection() as conn:
            if not self.rows.current(conn):
                return False
            where = "tenant = %s AND user_id = %s AND kind = %s AND name = %s"
            if replace:
                conn.execute(f"DELETE FROM blocks WHERE {where} AND block <> ALL(%s)", (*owner, kept))
            elif gone := [n for n, data in blocks.items() if data is None]:
                conn.execute(f"DELETE FROM blocks WHERE {where} AND block = ANY(%s)", (*owner, gone))
            with conn.cursor() as cur:
                cur.executemany(
                    "INSERT INTO blocks (tenant, user_id, kind, name, block, data) "
                    "VALUES (%s, %s, %s, %s, %s, %s) ON CONFLICT (tenant, user_id, kind, name, block) "
                    "DO UPDATE SET data = EXCLUDED.data",
                    [(*owner, n, blocks[n]) for n in kept],
                )
        return True

    def last(self, kind: str, name: str) -> tuple[int, int] | None:
        """The highest block number of (kind, name) and that block's size in bytes; None when it has none.
        (length() of a stored value reads its size from the TOAST pointer, not the value.)"""
        with self.rows.connection() as conn:
            row = conn.execute(
                "SELECT block, length(data) FROM blocks "
                "WHERE tenant = %s AND user_id = %s AND kind = %s AND name = %s ORDER BY block DESC LIMIT 1",
                (self.rows.tenant, self.rows.user, kind, name),
            ).fetchone()
        return None if row is None else (row[0], row[1])

    def names(self, kind: str) -> list[str]:
        """Every name that holds blocks of `kind`, sorted."""
        with self.rows.connection() as conn:
            found = conn.execute(
                "SELECT DISTINCT name FROM blocks WHERE tenant = %s AND user_id = %s AND kind = %s "
                "ORDER BY name",
                (self.rows.tenant, self.rows.user, kind),
            ).fetchall()
        return [name for (name,) in found]


@dataclass(frozen=True)
class RowsUserStorage(LocalUserStorage):
    """A user's storage on a server database: vectors in the database, `dir` a scratch folder of this
    replica's own."""

    rows: DerivedRows | None = None

    def embedding_cache(self) -> vector_blocks.BlockEmbeddingCache:
        """The user's vectors, in their "vectors" blocks."""
        return vector_blocks.BlockEmbeddingCache(self.blocks())

    def blocks(self) -> RowsBlocks:
        return RowsBlocks(self.rows)


class RowsLLMCache:
    """`LLMCache`'s interface over the user's rows: the memory model's replies by request key."""

    def __init__(self, rows: DerivedRows):
        self.rows = rows
        self.hits = self.misses = self.writes = 0

    def get(self, key: str) -> dict[str, Any] | None:
        value = self.rows.get(LLM_REPLY, "", [key]).get(key)
        if value is None:
            self.misses += 1
            return None
        self.hits += 1
        return json.loads(value)

    def put(self, key: str, value: dict[str, Any], model: str = "") -> None:
        if self.rows.put(LLM_REPLY, "", {key: canonical_json(value).encode()}):
            self.writes += 1

    def stats(self) -> dict[str, int]:
        return {"hits": self.hits, "misses": self.misses, "writes": self.writes}

    def close(self) -> None:
        """Nothing to release: the rows' connections belong to the store's pool."""


def drop_derived(
    conn: Connection, tenant: str, user: str, vectors: Mapping[str, Collection[str]] | None
) -> None:
    """In a deletion's transaction (the user's generation row locked): delete what was derived from the
    deleted messages. `vectors`: their vector keys by model identity; the user's other vectors of those
    models are kept (the "vectors" blocks rewritten without the deleted keys), and everything else derived
    goes (the memory model's replies may quote any message). None: everything derived goes."""
    owner = (tenant, user)
    conn.execute("DELETE FROM derived WHERE tenant = %s AND user_id = %s", owner)
    if vectors is None:
        conn.execute("DELETE FROM blocks WHERE tenant = %s AND user_id = %s", owner)
        return
    models = sorted(vectors)
    conn.execute(
        "DELETE FROM blocks WHERE tenant = %s AND user_id = %s AND NOT (kind = %s AND name = ANY(%s))",
        (*owner, vector_blocks.KIND, models),
    )
    for model in models:
        _drop_vectors(conn, owner, model, set(vectors[model]))


def _drop_vectors(conn: Connection, owner: tuple[str, str], model: str, keys: set[str]) -> None:
    """Rewrite the user's vector blocks of `model` without `keys`, one block in memory at a time."""
    if not keys:
        return
    where = "tenant = %s AND user_id = %s AND kind = %s AND name = %s"
    args = (*owner, vector_blocks.KIND, model)
    numbers = [n for (n,) in conn.execute(f"SELECT block FROM blocks WHERE {where} ORDER BY block", args)]
    for number in numbers:
        (data,) = conn.execute(
            f"SELECT data FROM blocks WHERE {where} AND block = %s", (*args, number), binary=True
        ).fetchone()
        data = bytes(data)
        left = vector_blocks.without(data, keys)
        if left is None:
            conn.execute(f"DELETE FROM blocks WHERE {where} AND block = %s", (*args, number))
        elif left is not data:
            conn.execute(f"UPDATE blocks SET data = %s WHERE {where} AND block = %s", (left, *args, number))
