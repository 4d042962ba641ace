"""A user's derived data as rows of the server database (table `derived` of lazymem/agent/postgres_store.py).

Two views of the same rows: the retrievers' embedding cache (`RowsUserStorage.embedding_cache`) and the
memory model's response cache (`RowsLLMCache`). Each is bound to the generation the user had when it was
opened; a write under an older generation is dropped, so a query that started before a forget (on this
replica or another) cannot store anything derived from the forgotten messages after it.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Any

import numpy as np
from psycopg import Connection

from lazymem.llm.cache import canonical_json
from lazymem.retrieval.base import UserStorage

EMBEDDING, LLM_REPLY = "embedding", "llm"


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
            row = conn.execute(
                "SELECT generation FROM generations WHERE tenant = %s AND user_id = %s FOR SHARE",
                (self.tenant, self.user),
            ).fetchone()
            if row is None or row[0] != self.generation:
                self.dropped += 1
                return False
            now = time.time()
            with conn.cursor() as cur:
                cur.executemany(
                    "INSERT INTO derived (tenant, user_id, kind, model, key, value, created) "
                    "VALUES (%s, %s, %s, %s, %s, %s, %s) ON CONFLICT DO NOTHING",
                    [(self.tenant, self.user, kind, model, k, v, now) for k, v in items.items()],
                )
        return True


class RowsEmbeddingCache:
    """`EmbeddingCache`'s interface over the user's rows: float32 vectors by (model identity, text key)."""

    def __init__(self, rows: DerivedRows):
        self.rows = rows
        self.hits = self.misses = 0

    def get(self, model: str, keys) -> dict[str, np.ndarray]:
        unique = list(dict.fromkeys(keys))
        rows = self.rows.get(EMBEDDING, model, unique)
        found = {k: np.frombuffer(v, dtype=np.float32) for k, v in rows.items()}
        self.hits += len(found)
        self.misses += len(unique) - len(found)
        return found

    def put(self, model: str, items: dict[str, np.ndarray]) -> None:
        if items:
            packed = {k: np.asarray(v, dtype=np.float32).ravel().tobytes() for k, v in items.items()}
            self.rows.put(EMBEDDING, model, packed)

    def close(self) -> None:
        """Nothing to release: the rows' connections belong to the store's pool."""


@dataclass(frozen=True)
class RowsUserStorage(UserStorage):
    """A user's storage on a server database: vectors in the database, `dir` a scratch folder of this
    replica's own."""

    rows: DerivedRows | None = None

    def embedding_cache(self) -> RowsEmbeddingCache:
        return RowsEmbeddingCache(self.rows)


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
        """Nothing to release (see RowsEmbeddingCache.close)."""
