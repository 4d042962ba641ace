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

Faults: a call that gets no pooled connection within `wait_s`, whose connection breaks, or whose statement
runs past `wait_s` (the statement timeout) raises StoreUnavailable; a pooled connection is checked before
each use, so one the server dropped while it sat idle is replaced rather than failing a call. After an
outage the pool reconnects by itself (see `_RECONNECT_S`). A deletion's own work (forget, purge) is not cut
by the statement timeout, as its size is the user's or the tenant's: only its waits for locks are
(lock_timeout); maintenance and migrations have no timeout.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Collection, Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import psycopg
from psycopg import Connection
from psycopg.conninfo import conninfo_to_dict
from psycopg_pool import ConnectionPool, PoolClosed, PoolTimeout

from lazymem.agent.derived_rows import EMBEDDING, DerivedRows, RowsLLMCache, RowsUserStorage
from lazymem.agent.errors import IdempotencyConflict, StoreUnavailable, UnknownMessages
from lazymem.agent.store import (
    MESSAGE_COLUMNS,
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
)

# The database's clock as unix time, as every stored time is
_NOW = "extract(epoch FROM clock_timestamp())"

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
    [
        """CREATE TABLE idempotency (
            tenant  TEXT NOT NULL,
            user_id TEXT NOT NULL,
            key     TEXT NOT NULL,
            digest  TEXT NOT NULL,
            ids     BIGINT[] NOT NULL,
            created DOUBLE PRECISION NOT NULL,
            PRIMARY KEY (tenant, user_id, key)
        )""",
        "CREATE INDEX idempotency_by_age ON idempotency (created)",
        # since: the time the user became pending (a user already pending: the upgrade's time)
        f"ALTER TABLE pending ADD COLUMN since DOUBLE PRECISION NOT NULL DEFAULT {_NOW}",
        "ALTER TABLE pending ADD COLUMN claimed_at DOUBLE PRECISION",
    ],
]
VERSION = len(MIGRATIONS)
# Advisory lock keys (any constants unique within the database).
_MIGRATE_LOCK, _PURGE_LOCK, _MAINTAIN_LOCK = 72_001, 72_002, 72_003
# The tables a maintenance step rewrites: every one that holds message text or what is derived from it.
_TEXT_TABLES = ("messages", "derived", "generations", "pending")
# The pool retries a lost connection after 1, 2, 4 ... s until this many seconds, then gives up and connects
# anew when a call next needs one: so once the server is back after an outage, the next try comes within
# 4 s (its longest delay). psycopg_pool's default (300 s) let the delay grow to minutes: after outages of
# 40 and 90 s the first add came 15 to 31 s after the restart, and 0 to 3 s with this bound.
_RECONNECT_S = 10.0
# SQLSTATE classes that mean the database cannot serve now, not that a call is wrong: connection
# exceptions, insufficient resources (too many connections, disk full), operator intervention (shutdown,
# statement timeout) and system errors (I/O)
_UNAVAILABLE_CLASSES = ("08", "53", "57", "58")


class PostgresStore:
    """`Store` in a PostgreSQL database; safe from any thread, and from any number of processes."""

    derived_in_store = True  # derived data: rows of `derived`; the user folders are scratch

    def __init__(self, dsn: str, pool_size: int = 8, wait_s: float = 3.0, idempotency_ttl_s: float = 86400.0):
        """Fails with StoreUnavailable when the database cannot be reached within `wait_s`."""
        self.wait_s, self.idempotency_ttl_s = wait_s, idempotency_ttl_s
        params = conninfo_to_dict(dsn)
        self._where = "PostgreSQL at {}:{}/{}".format(
            params.get("host", "localhost"), params.get("port", 5432), params.get("dbname", "")
        )
        self._password = params.get("password")
        self._connect_error: str | None = None  # why the pool's last connect failed (None: it did not)
        options = f"{params.get('options', '')} -c statement_timeout={round(wait_s * 1000)}".strip()
        self.pool = ConnectionPool(
            dsn,
            connection_class=_noting_connects(self._note_connect),
            kwargs={"options": options, "connect_timeout": max(2, math.ceil(wait_s))},
            min_size=1,
            max_size=pool_size,
            timeout=wait_s,
            check=self._check,
            reconnect_timeout=_RECONNECT_S,
            open=True,
            name="lazymem-store",
        )
        try:
            with self.connection() as conn:
                migrate(conn)
        except BaseException:
            self.pool.close()
            raise

    @contextmanager
    def connection(self, wait_s: float | None = None) -> Iterator[Connection]:
        """A pooled connection in a transaction, committed at the end (rolled back on an error). No
        connection within `wait_s` (by default the store's), or one that fails, is StoreUnavailable."""
        wait_s = self.wait_s if wait_s is None else wait_s
        try:
            with self.pool.connection(timeout=wait_s) as conn:
                yield conn
        except PoolTimeout as e:
            why = self._connect_error or f"all {self.pool.max_size} connections busy"
            raise StoreUnavailable(self._reason(f"no connection within {wait_s:g}s ({why})")) from e
        except psycopg.OperationalError as e:
            if not _unavailable(e):
                raise
            raise StoreUnavailable(self._reason(_first_line(e))) from e

    def add(
        self, tenant: str, user: str, messages: Sequence[NewMessage], idempotency: Idempotency | None = None
    ) -> Added:
        with self.connection() as conn:
            if idempotency is not None:
                earlier = self._take_key(conn, tenant, user, idempotency)
                if earlier is not None:
                    return Added(earlier, 0, replayed=True)
            # Next: the tenant's id row stays locked until commit, so a concurrent add of the same sources
            # (two replicas resuming one import) reads them below instead of hitting the unique index.
            (last,) = conn.execute(
                "INSERT INTO tenant_ids (tenant, last_id) VALUES (%s, %s) ON CONFLICT (tenant) "
                "DO UPDATE SET last_id = tenant_ids.last_id + EXCLUDED.last_id RETURNING last_id",
                (tenant, len(messages)),
            ).fetchone()
            first = last - len(messages) + 1
            keys = [k for m in messages for k in m.keys]
            rows = (  # an alias is looked up as a source: an earlier import stored it as one
                conn.execute(
                    "SELECT source, id, role, text FROM messages "
                    "WHERE tenant = %s AND user_id = %s AND source = ANY(%s)",
                    (tenant, user, keys),
                ).fetchall()
                if keys
                else []
            )
            known = {source: tuple(rest) for source, *rest in rows}
            ids, rows = [], []
            for n, m in enumerate(messages):
                stored = already_stored(m, known)
                if stored is not None:
                    ids.append(stored)
                    continue
                if m.source is not None:  # a source named twice in one batch is stored once
                    known[m.source] = (first + n, m.role, m.text)
                ids.append(first + n)
                rows.append((tenant, user, first + n, m.session_id, m.time, m.role, m.text, m.source))
            if rows:
                with conn.cursor() as cur:
                    cur.executemany(
                        "INSERT INTO messages (tenant, user_id, id, session_id, time, role, text, added, "
                        f"source) VALUES (%s, %s, %s, %s, %s, %s, %s, {_NOW}, %s)",
                        rows,
                    )
                conn.execute(
                    "INSERT INTO generations (tenant, user_id, generation) "
                    "VALUES (%s, %s, nextval('generation_seq')) ON CONFLICT DO NOTHING",
                    (tenant, user),
                )
                conn.execute(  # pending since its first add not yet indexed
                    "INSERT INTO pending (tenant, user_id, mark, since) "
                    f"VALUES (%s, %s, nextval('pending_seq'), {_NOW}) "
                    "ON CONFLICT (tenant, user_id) DO UPDATE SET mark = EXCLUDED.mark",
                    (tenant, user),
                )
            if idempotency is not None:
                conn.execute(
                    "UPDATE idempotency SET ids = %s WHERE tenant = %s AND user_id = %s AND key = %s",
                    (ids, tenant, user, idempotency.key),
                )
        return Added(ids, len(rows))

    def ready(self) -> Readiness:
        """Answers within a second: half of it (or `wait_s`, if shorter) for a connection, and as much for
        the query, so that a readiness probe learns of an outage in time."""
        bound = min(0.5, self.wait_s)
        with self.connection(bound) as conn, conn.pipeline():  # both statements in one round trip
            conn.execute("SELECT set_config('statement_timeout', %s, true)", (f"{round(bound * 1000)}ms",))
            cur = conn.execute(
                f"SELECT count(*), {_NOW} - min(since), "
                f"{_NOW} - min(claimed_at) FILTER (WHERE claimed_until > {_NOW}) FROM pending"
            )
            backlog, pending_s, claim_s = cur.fetchone()
        return Readiness(backlog, _age(pending_s), _age(claim_s))

    def claim_pending(self, lease_s: float) -> Claim | None:
        """Claimed in the database (FOR UPDATE SKIP LOCKED): replicas never wait on each other's claims."""
        with self.connection() as conn:
            row = conn.execute(
                f"UPDATE pending SET claimed_until = {_NOW} + %s, claimed_at = {_NOW} "
                "WHERE (tenant, user_id) = (SELECT tenant, user_id FROM pending "
                f"WHERE claimed_until < {_NOW} "
                "ORDER BY mark LIMIT 1 FOR UPDATE SKIP LOCKED) RETURNING tenant, user_id, mark",
                (lease_s,),
            ).fetchone()
        return None if row is None else Claim(*row)

    def finish(self, claim: Claim) -> None:
        with self.connection() as conn:
            conn.execute(
                "DELETE FROM pending WHERE tenant = %s AND user_id = %s AND mark = %s",
                (claim.tenant, claim.user, claim.mark),
            )
            conn.execute(  # added to since the claim: pending again (since then), for whoever comes next
                "UPDATE pending SET claimed_until = 0, since = coalesce(claimed_at, since), "
                "claimed_at = NULL WHERE tenant = %s AND user_id = %s",
                (claim.tenant, claim.user),
            )

    def snapshot(self, tenant: str, user: str, after: int = 0, limit: int | None = None) -> Snapshot:
        with self.connection() as conn:
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
        with self.connection() as conn:
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
        with self.connection() as conn:
            self._unbounded_work(conn)
            _lock_user(conn, tenant, user)
            if ids is None:
                deleted = conn.execute(
                    "DELETE FROM messages WHERE tenant = %s AND user_id = %s", (tenant, user)
                ).rowcount
                conn.execute("DELETE FROM idempotency WHERE tenant = %s AND user_id = %s", (tenant, user))
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
        """The users' idempotency keys stay until they expire."""
        with self.connection() as conn:
            if not conn.execute("SELECT pg_try_advisory_xact_lock(%s)", (_PURGE_LOCK,)).fetchone()[0]:
                return None  # another replica is purging
            self._unbounded_work(conn)
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
        """Delete the expired idempotency keys; after deletions, rewrite the tables that held the text
        (VACUUM FULL) and checkpoint, so no table file keeps a dead copy. Skipped when another replica
        runs it; the rewrite is skipped when nothing was deleted since the last one."""
        with self.connection() as conn:
            conn.autocommit = True
            try:
                if not conn.execute("SELECT pg_try_advisory_lock(%s)", (_MAINTAIN_LOCK,)).fetchone()[0]:
                    return
                try:
                    conn.execute("SET statement_timeout = 0")  # a rewrite takes as long as the table needs
                    conn.execute(
                        f"DELETE FROM idempotency WHERE created <= {_NOW} - %s", (self.idempotency_ttl_s,)
                    )
                    if conn.execute("UPDATE maintenance SET pending = false WHERE pending").rowcount:
                        for table in _TEXT_TABLES:
                            conn.execute(f"VACUUM FULL {table}")
                        conn.execute("CHECKPOINT")
                finally:
                    conn.execute("RESET statement_timeout")
                    conn.execute("SELECT pg_advisory_unlock(%s)", (_MAINTAIN_LOCK,))
            finally:
                conn.autocommit = False

    def derived(self, tenant: str, user: str, dir: Path, generation: int) -> Derived:
        rows = DerivedRows(self.connection, tenant, user, generation)
        return Derived(RowsUserStorage(dir, rows), lambda: RowsLLMCache(rows))

    def close(self) -> None:
        self.pool.close()

    def _take_key(
        self, conn: Connection, tenant: str, user: str, idempotency: Idempotency
    ) -> list[int] | None:
        """Hold the idempotency key for this add's transaction; the ids of the earlier add that holds it,
        if it is still remembered. An add of the same key that has not committed yet makes the insert wait
        for it: this add then replays its ids instead of storing the batch a second time."""
        key = (tenant, user, idempotency.key)
        while True:
            if conn.execute(
                "INSERT INTO idempotency (tenant, user_id, key, digest, ids, created) "
                f"VALUES (%s, %s, %s, %s, '{{}}', {_NOW}) ON CONFLICT DO NOTHING",
                (*key, idempotency.digest),
            ).rowcount:
                return None
            row = conn.execute(
                f"SELECT digest, ids, created > {_NOW} - %s FROM idempotency "
                "WHERE tenant = %s AND user_id = %s AND key = %s FOR UPDATE",
                (self.idempotency_ttl_s, *key),
            ).fetchone()
            if row is None:
                continue  # deleted since (a forget, an expiry): take it again
            digest, ids, live = row
            if not live:  # expired: the key is this add's now
                conn.execute(
                    f"UPDATE idempotency SET digest = %s, ids = '{{}}', created = {_NOW} "
                    "WHERE tenant = %s AND user_id = %s AND key = %s",
                    (idempotency.digest, *key),
                )
                return None
            if digest != idempotency.digest:
                raise IdempotencyConflict(
                    "this idempotency key was already used for this user with another request body; "
                    "nothing was stored"
                )
            return ids

    def _unbounded_work(self, conn: Connection) -> None:
        """For this transaction: no statement timeout (a deletion's work grows with the messages it
        deletes), but a wait for another transaction's lock still ends after wait_s."""
        conn.execute(
            "SELECT set_config('statement_timeout', '0', true), set_config('lock_timeout', %s, true)",
            (f"{round(self.wait_s * 1000)}ms",),
        )

    def _check(self, conn: Connection) -> None:
        """The pool's check of a connection before it lends it. A broken one (the server dropped it)
        means the others are likely broken too: check them all now, which replaces them at once, rather
        than one per try with the pool's back-off between tries."""
        try:
            ConnectionPool.check_connection(conn)
        except psycopg.Error:
            self.pool.check()
            raise

    def _note_connect(self, error: str | None) -> None:
        self._connect_error = error

    def _reason(self, what: str) -> str:
        reason = f"{self._where}: {what}"
        return reason.replace(self._password, "***") if self._password else reason


def migrate(conn: Connection) -> int:
    """Bring the database to VERSION, one replica at a time (the others wait on the advisory lock); the
    version it had before."""
    conn.execute("SELECT set_config('statement_timeout', '0', true)")  # a step may rewrite a table
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


def _noting_connects(note: Callable[[str | None], None]) -> type[Connection]:
    """A connection class whose connects tell `note` why they failed (None once one succeeds), so that a
    pool timeout can say why it got no connection."""

    class NotingConnection(Connection):
        @classmethod
        def connect(cls, conninfo: str = "", **kwargs: Any) -> NotingConnection:
            try:
                conn = super().connect(conninfo, **kwargs)
            except psycopg.OperationalError as e:
                note(_first_line(e))
                raise
            note(None)
            return conn

    return NotingConnection


def _unavailable(e: psycopg.OperationalError) -> bool:
    """Whether an error means the database cannot serve now (StoreUnavailable) rather than a bug: a lost
    connection (no SQLSTATE), one of _UNAVAILABLE_CLASSES, or a lock wait past lock_timeout. Deadlocks and
    serialization failures are not: this store's lock order should make them impossible."""
    if isinstance(e, PoolClosed):
        return False  # used after close()
    if isinstance(e, psycopg.errors.LockNotAvailable):
        return True
    return e.sqlstate is None or e.sqlstate[:2] in _UNAVAILABLE_CLASSES


def _first_line(e: BaseException) -> str:
    lines = str(e).strip().splitlines()
    return lines[0] if lines else type(e).__name__


def _age(seconds: float | None) -> float | None:
    return None if seconds is None else max(0.0, seconds)
