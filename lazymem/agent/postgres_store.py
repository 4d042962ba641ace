"""The server store: one PostgreSQL database shared by several `lazymem serve` replicas (psycopg 3, pooled).

    agent.store.kind=postgres agent.store.dsn=postgresql://USER@HOST:PORT/DB

Everything a replica derives from a user's messages that outlives a query lives in this database too
(table `derived`: embedding vectors and memory-model replies), so every replica shares it and a forget
deletes it in the same transaction as the messages. What stays in a replica's memory (its indexes) is
tagged with the user's generation and rebuilt when another replica changed it.

Concurrency: a forget locks the user's `generations` row first; a write of derived data takes a share lock
on it and is dropped if the generation moved, so nothing derived from forgotten text is written after the
forget commits. Each tenant's id counter is a row of `tenant_ids`, locked by the add that advances it.
One replica at a time runs the retention purge and the maintenance step (advisory locks).

"No trace" on PostgreSQL: after a forget no row holds the text or anything derived from it. DELETE leaves
dead tuples in the table's pages until they are vacuumed, so `maintain` (the service runs it every
serve.maintain_every_s) rewrites the tables with VACUUM FULL and takes a checkpoint. WAL segments and
backups keep the text until they are recycled or expire: docs/agent-scale.md says how an operator shortens
that.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from pathlib import Path

from psycopg import Connection
from psycopg_pool import ConnectionPool

from lazymem.agent.derived_rows import EMBEDDING, DerivedRows, RowsLLMCache, RowsUserStorage
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

# Schema versions, each a list of statements; a database is brought from its version to the last one.
MIGRATIONS: list[list[str]] = [
    [
        """CREATE TABLE messages (
            tenant     TEXT NOT NULL,
            user_id    TEXT NOT NULL,
            id         BIGINT NOT NULL,
            session_id TEXT NOT NULL,
            time       TEXT NOT NULL,
            role       TEXT NOT NULL,
            text       TEXT NOT NULL,
            added      DOUBLE PRECISION NOT NULL,
            source     TEXT,
            PRIMARY KEY (tenant, id)
        )""",
        "CREATE INDEX messages_by_user ON messages (tenant, user_id, id)",
        "CREATE UNIQUE INDEX messages_by_source ON messages (tenant, user_id, source) "
        "WHERE source IS NOT NULL",
        "CREATE TABLE tenant_ids (tenant TEXT PRIMARY KEY, last_id BIGINT NOT NULL)",
        "CREATE SEQUENCE generation_seq",
        "CREATE TABLE generations (tenant TEXT, user_id TEXT, generation BIGINT NOT NULL, "
        "PRIMARY KEY (tenant, user_id))",
        """CREATE TABLE derived (
            tenant  TEXT NOT NULL,
            user_id TEXT NOT NULL,
            kind    TEXT NOT NULL,
            model   TEXT NOT NULL,
            key     TEXT NOT NULL,
            value   BYTEA NOT NULL,
            created DOUBLE PRECISION NOT NULL,
            PRIMARY KEY (tenant, user_id, kind, model, key)
        )""",
        "CREATE SEQUENCE pending_seq",
        "CREATE TABLE pending (tenant TEXT, user_id TEXT, mark BIGINT NOT NULL, "
        "claimed_until DOUBLE PRECISION NOT NULL DEFAULT 0, PRIMARY KEY (tenant, user_id))",
        "CREATE TABLE maintenance (pending BOOLEAN NOT NULL)",
        "INSERT INTO maintenance VALUES (false)",
    ],
]
VERSION = len(MIGRATIONS)
# Advisory lock keys (any constants unique within the database).
_MIGRATE_LOCK, _PURGE_LOCK, _MAINTAIN_LOCK = 72_001, 72_002, 72_003
# The tables a maintenance step rewrites: every one that holds message text or what is derived from it.
_TEXT_TABLES = ("messages", "derived", "generations", "pending")


class PostgresStore:
    """`Store` in a PostgreSQL database; safe from any thread, and from any number of processes."""

    derived_in_store = True  # derived data: rows of `derived`; the user folders are scratch

    def __init__(self, dsn: str, pool_size: int = 8):
        self.pool = ConnectionPool(dsn, min_size=1, max_size=pool_size, open=True, name="lazymem-store")
        with self.pool.connection() as conn:
            migrate(conn)

    def add(self, tenant: str, user: str, messages: Sequence[NewMessage]) -> list[int]:
        with self.pool.connection() as conn:
            # First: the tenant's id row stays locked until commit, so a concurrent add of the same sources
            # (two replicas resuming one import) reads them below instead of hitting the unique index.
            (last,) = conn.execute(
                "INSERT INTO tenant_ids (tenant, last_id) VALUES (%s, %s) ON CONFLICT (tenant) "
                "DO UPDATE SET last_id = tenant_ids.last_id + EXCLUDED.last_id RETURNING last_id",
                (tenant, len(messages)),
            ).fetchone()
            first = last - len(messages) + 1
            sources = [m.source for m in messages if m.source is not None]
            known = dict(
                conn.execute(
                    "SELECT source, id FROM messages WHERE tenant = %s AND user_id = %s AND source = ANY(%s)",
                    (tenant, user, sources),
                ).fetchall()
                if sources
                else []
            )
            ids, rows = [], []
            for n, m in enumerate(messages):
                if m.source in known:
                    ids.append(known[m.source])
                    continue
                if m.source is not None:
                    known[m.source] = first + n  # a source named twice in one batch is stored once
                ids.append(first + n)
                rows.append((tenant, user, first + n, m.session_id, m.time, m.role, m.text, m.source))
            with conn.cursor() as cur:
                cur.executemany(
                    "INSERT INTO messages (tenant, user_id, id, session_id, time, role, text, added, source) "
                    "VALUES (%s, %s, %s, %s, %s, %s, %s, extract(epoch FROM clock_timestamp()), %s)",
                    rows,
                )
            conn.execute(
                "INSERT INTO generations (tenant, user_id, generation) "
                "VALUES (%s, %s, nextval('generation_seq')) ON CONFLICT DO NOTHING",
                (tenant, user),
            )
            conn.execute(
                "INSERT INTO pending (tenant, user_id, mark) VALUES (%s, %s, nextval('pending_seq')) "
                "ON CONFLICT (tenant, user_id) DO UPDATE SET mark = EXCLUDED.mark",
                (tenant, user),
            )
        return ids

    def claim_pending(self, lease_s: float) -> Claim | None:
        """Claimed in the database (FOR UPDATE SKIP LOCKED): replicas never wait on each other's claims."""
        with self.pool.connection() as conn:
            row = conn.execute(
                "UPDATE pending SET claimed_until = extract(epoch FROM clock_timestamp()) + %s "
                "WHERE (tenant, user_id) = (SELECT tenant, user_id FROM pending "
                "WHERE claimed_until < extract(epoch FROM clock_timestamp()) "
                "ORDER BY mark LIMIT 1 FOR UPDATE SKIP LOCKED) RETURNING tenant, user_id, mark",
                (lease_s,),
            ).fetchone()
        return None if row is None else Claim(*row)

    def finish(self, claim: Claim) -> None:
        with self.pool.connection() as conn:
            conn.execute(
                "DELETE FROM pending WHERE tenant = %s AND user_id = %s AND mark = %s",
                (claim.tenant, claim.user, claim.mark),
            )
            conn.execute(  # added to since the claim: pending again, for whoever comes next
                "UPDATE pending SET claimed_until = 0 WHERE tenant = %s AND user_id = %s",
                (claim.tenant, claim.user),
            )

    def snapshot(self, tenant: str, user: str, after: int = 0, limit: int | None = None) -> Snapshot:
        with self.pool.connection() as conn:
            rows = conn.execute(  # one statement: the messages and the generation of one moment
                "SELECT g.generation, m.id, m.session_id, m.time, m.role, m.text, m.added FROM generations g "
                "LEFT JOIN messages m ON m.tenant = g.tenant AND m.user_id = g.user_id AND m.id > %s "
                "WHERE g.tenant = %s AND g.user_id = %s ORDER BY m.id LIMIT %s",  # LIMIT NULL: no limit
                (after, tenant, user, limit),
            ).fetchall()
        if not rows:
            return Snapshot(None, [])
        return Snapshot(rows[0][0], [StoredMessage(*row[1:]) for row in rows if row[1] is not None])

    def generations(self, users: Sequence[tuple[str, str]]) -> dict[tuple[str, str], int]:
        if not users:
            return {}
        with self.pool.connection() as conn:
            rows = conn.execute(
                "SELECT g.tenant, g.user_id, g.generation FROM generations g "
                "JOIN unnest(%s::text[], %s::text[]) AS u(tenant, user_id) "
                "ON g.tenant = u.tenant AND g.user_id = u.user_id",
                ([t for t, _ in users], [u for _, u in users]),
            ).fetchall()
        return {(t, u): g for t, u, g in rows}

    def forget(
        self, tenant: str, user: str, ids: Sequence[int] | None = None, vector_keys: VectorKeys | None = None
    ) -> int:
        with self.pool.connection() as conn:
            _lock_user(conn, tenant, user)
            if ids is None:
                deleted = conn.execute(
                    "DELETE FROM messages WHERE tenant = %s AND user_id = %s", (tenant, user)
                ).rowcount
                _drop_derived(conn, tenant, user, None)
                return deleted
            wanted = sorted(set(ids))
            mine = {
                row[0]
                for row in conn.execute(
                    "SELECT id FROM messages WHERE tenant = %s AND user_id = %s AND id = ANY(%s)",
                    (tenant, user, wanted),
                )
            }
            missing = [i for i in wanted if i not in mine]
            if missing:
                raise UnknownMessages(missing)  # the connection's context rolls back
            rows = conn.execute(
                f"DELETE FROM messages WHERE tenant = %s AND id = ANY(%s) RETURNING {MESSAGE_COLUMNS}",
                (tenant, wanted),
            ).fetchall()
            gone = [StoredMessage(*row) for row in rows]
            _drop_derived(conn, tenant, user, None if vector_keys is None else vector_keys(user, gone))
        return len(gone)

    def purge(
        self, tenant: str, before: float, vector_keys: VectorKeys | None = None
    ) -> dict[str, int] | None:
        with self.pool.connection() as conn:
            if not conn.execute("SELECT pg_try_advisory_xact_lock(%s)", (_PURGE_LOCK,)).fetchone()[0]:
                return None  # another replica is purging
            users = [
                row[0]
                for row in conn.execute(
                    "SELECT DISTINCT user_id FROM messages WHERE tenant = %s AND added < %s ORDER BY user_id",
                    (tenant, before),
                )
            ]
            for user in users:
                _lock_user(conn, tenant, user)
            counts = {}
            for user in users:  # user by user: one user's deleted rows in memory at a time
                gone = [
                    StoredMessage(*row)
                    for row in conn.execute(
                        "DELETE FROM messages WHERE tenant = %s AND user_id = %s AND added < %s "
                        f"RETURNING {MESSAGE_COLUMNS}",
                        (tenant, user, before),
                    ).fetchall()
                ]
                _drop_derived(conn, tenant, user, None if vector_keys is None else vector_keys(user, gone))
                counts[user] = len(gone)
        return counts

    def maintain(self) -> None:
        """After deletions: rewrite the tables that held the text (VACUUM FULL) and checkpoint, so no
        table file keeps a dead copy. Skipped when nothing was deleted since, or another replica runs it."""
        with self.pool.connection() as conn:
            conn.autocommit = True
            try:
                if not conn.execute("SELECT pg_try_advisory_lock(%s)", (_MAINTAIN_LOCK,)).fetchone()[0]:
                    return
                try:
                    if conn.execute("UPDATE maintenance SET pending = false WHERE pending").rowcount:
                        for table in _TEXT_TABLES:
                            conn.execute(f"VACUUM FULL {table}")
                        conn.execute("CHECKPOINT")
                finally:
                    conn.execute("SELECT pg_advisory_unlock(%s)", (_MAINTAIN_LOCK,))
            finally:
                conn.autocommit = False

    def derived(self, tenant: str, user: str, dir: Path, generation: int) -> Derived:
        rows = DerivedRows(self.pool, tenant, user, generation)
        return Derived(RowsUserStorage(dir, rows), lambda: RowsLLMCache(rows))

    def close(self) -> None:
        self.pool.close()


def migrate(conn: Connection) -> int:
    """Bring the database to VERSION, one replica at a time (the others wait on the advisory lock); the
    version it had before."""
    conn.execute("SELECT pg_advisory_xact_lock(%s)", (_MIGRATE_LOCK,))
    conn.execute("CREATE TABLE IF NOT EXISTS schema_version (version INTEGER NOT NULL)")
    row = conn.execute("SELECT version FROM schema_version").fetchone()
    before = 0 if row is None else row[0]
    if before > VERSION:
        raise RuntimeError(f"the database has lazymem schema version {before}; this lazymem knows {VERSION}")
    for statements in MIGRATIONS[before:]:
        for statement in statements:
            conn.execute(statement)
    if row is None:
        conn.execute("INSERT INTO schema_version VALUES (%s)", (VERSION,))
    else:
        conn.execute("UPDATE schema_version SET version = %s", (VERSION,))
    conn.commit()
    return before


def _lock_user(conn: Connection, tenant: str, user: str) -> None:
    """Lock the user's generation row before deleting: derived-data writes wait for it (see above)."""
    conn.execute(
        "SELECT generation FROM generations WHERE tenant = %s AND user_id = %s FOR UPDATE", (tenant, user)
    )


def _drop_derived(
    conn: Connection, tenant: str, user: str, vectors: Mapping[str, Collection[str]] | None
) -> None:
    """With some of the user's messages deleted in this transaction: delete what was derived from them,
    give the user a new generation (or none, when no message is left), and mark the tables for maintenance.
    `vectors`: the deleted messages' vector keys by model; the user's other vectors of those models are
    kept, and everything else derived is deleted. None: everything derived is deleted."""
    left = conn.execute(
        "SELECT 1 FROM messages WHERE tenant = %s AND user_id = %s LIMIT 1", (tenant, user)
    ).fetchone()
    if left is None or vectors is None:
        conn.execute("DELETE FROM derived WHERE tenant = %s AND user_id = %s", (tenant, user))
    else:
        models = sorted(vectors)
        conn.execute(
            "DELETE FROM derived WHERE tenant = %s AND user_id = %s AND NOT (kind = %s AND model = ANY(%s))",
            (tenant, user, EMBEDDING, models),
        )
        pairs = [(model, key) for model in models for key in vectors[model]]
        conn.execute(
            "DELETE FROM derived d USING unnest(%s::text[], %s::text[]) AS gone(model, key) "
            "WHERE d.tenant = %s AND d.user_id = %s AND d.kind = %s AND d.model = gone.model "
            "AND d.key = gone.key",
            ([m for m, _ in pairs], [k for _, k in pairs], tenant, user, EMBEDDING),
        )
    if left is None:
        conn.execute("DELETE FROM generations WHERE tenant = %s AND user_id = %s", (tenant, user))
        conn.execute("DELETE FROM pending WHERE tenant = %s AND user_id = %s", (tenant, user))
    else:
        conn.execute(
            "UPDATE generations SET generation = nextval('generation_seq') "
            "WHERE tenant = %s AND user_id = %s",
            (tenant, user),
        )
    conn.execute("UPDATE maintenance SET pending = true")
