"""The server store: one PostgreSQL database shared by several `lazymem serve` replicas (psycopg 3, pooled).

    agent/store=postgres agent.store.dsn=postgresql://USER@HOST:PORT/DB

Everything a replica derives from a user's messages that outlives a query lives in this database too
(tables `derived`: memory-model replies, and `blocks`: vector blocks, BM25 state;
lazymem/agent/derived_rows.py), so every replica shares it and a forget deletes it in the same
transaction as the messages. What stays in a replica's memory (its indexes) is tagged with the user's
generation and rebuilt when another replica changed it.

Concurrency: a forget locks the user's `generations` row first; a write of derived data takes a share lock
on it and is dropped if the generation moved, so nothing derived from forgotten text is written after the
forget commits. Each tenant's id counter is a row of `tenant_ids`, locked by the add that advances it.
One replica at a time runs the retention purge and the maintenance step (advisory locks).

"No trace" on PostgreSQL: after a forget no row holds the text or anything derived from it. DELETE leaves
dead tuples in the table's pages until they are vacuumed, so `maintain` (the service runs it every
serve.maintain_every_s; lazymem/agent/postgres_maintenance.py) rewrites the tables with VACUUM FULL and takes
a checkpoint. WAL segments and backups keep the text until they are recycled or expire:
docs/agent-scale.md says how an operator shortens that.

Faults (lazymem/agent/postgres_pool.py): a call the database cannot serve in `wait_s` raises
StoreUnavailable. A deletion's own work (forget, purge) is not cut by the statement timeout, as its size
is the user's or the tenant's: only its waits for locks are (lock_timeout), and the server's answering
(lazymem/agent/postgres_watch.py); maintenance and migrations have no timeout. The schema and its
migrations are lazymem/agent/schema.py's, and the statements both stores run alike
lazymem/agent/store_sql.py's.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from pathlib import Path
from typing import Any

from psycopg import Connection

from lazymem.agent import store_sql
from lazymem.agent.config_block import Block
from lazymem.agent.derived_rows import DerivedRows, RowsLLMCache, RowsUserStorage, drop_derived
from lazymem.agent.errors import IdempotencyConflict
from lazymem.agent.postgres_maintenance import maintain
from lazymem.agent.postgres_pool import Pool, check_dsn, unbounded_work
from lazymem.agent.schema import (
    INSERT_COLUMNS,
    MESSAGE_COLUMNS,
    POSTGRES,
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

# The database's clock as unix time, as every stored time is
_NOW = POSTGRES.now
# Advisory lock keys (any constants unique within the database).
_MIGRATE_LOCK, _PURGE_LOCK = 72_001, 72_002  # and postgres_maintenance.MAINTAIN_LOCK


class PostgresStore:
    """`Store` in a PostgreSQL database; safe from any thread, and from any number of processes."""

    derived_in_store = True  # derived data: rows of `derived` and `blocks`; the user folders are scratch

    def __init__(
        self,
        dsn: str,
        pool_size: int = 8,
        wait_s: float = 3.0,
        idempotency_ttl_s: float = 86400.0,
        forgotten_ttl_s: float | None = None,
    ):
        """Fails with StoreUnavailable when the database cannot be reached within `wait_s`."""
        self.wait_s, self.idempotency_ttl_s = wait_s, idempotency_ttl_s
        self.forgotten_ttl_s = forgotten_ttl_s
        self.pool = Pool(dsn, pool_size, wait_s)
        # a pooled connection in a transaction (StoreUnavailable when the database does not serve in time)
        self.connection = self.pool.connection
        try:  # the schema, brought to this lazymem's version by one replica at a time
            with self.connection(unbounded=True) as conn:
                # a step may rewrite a table: no statement timeout
                conn.execute("SELECT set_config('statement_timeout', '0', true)")
                conn.execute("SELECT pg_advisory_xact_lock(%s)", (_MIGRATE_LOCK,))
                store_sql.migrate(conn, POSTGRES, "the database")
        except BaseException:
            self.pool.close()
            raise

    @staticmethod
    def check_keys(keys: Block) -> dict[str, Any]:
        """`agent.store`'s values for this store, checked at start-up (lazymem/agent/settings.py)."""
        dsn = keys.get("dsn")
        check_dsn(dsn, keys.key("dsn"))
        return {
            "idempotency_ttl_s": keys.seconds("idempotency_ttl_s"),
            "forgotten_ttl_s": keys.seconds("forgotten_ttl_s", nullable=True),
            "dsn": dsn,
            "pool_size": keys.integer("pool_size", 1),
            "wait_s": keys.seconds("wait_s"),
        }

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
            first = store_sql.reserve_ids(conn, POSTGRES, tenant, len(messages))
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
            forgotten = _forgotten(conn, tenant, user, messages)
            ids: list[int | None] = []
            rows = []
            for n, m in enumerate(messages):
                stored = already_stored(m, known)
                if stored is not None:
                    ids.append(stored)
                    continue
                if not forgotten.isdisjoint(tombstone_checks(m)):
                    ids.append(None)
                    continue
                source = m.source or new_key()
                known[source] = (first + n, m.role, m.text)  # a source named twice in one batch: stored once
                ids.append(first + n)
                rows.append((tenant, user, first + n, m.session_id, m.time, m.role, m.text, source))
            if rows:
                with conn.cursor() as cur:
                    cur.executemany(
                        f"INSERT INTO messages ({INSERT_COLUMNS}) "
                        f"VALUES (%s, %s, %s, %s, %s, %s, %s, {_NOW}, %s)",
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
        return Added(ids, len(rows), forgotten=ids.count(None))

    def ready(self) -> Readiness:
        """Answers within a second: half of it (or `wait_s`, if shorter) for a connection, and as much for
        the query (on both sides: lazymem/agent/postgres_pool.py), so that a readiness probe learns of an
        outage in time."""
        bound = min(0.5, self.wait_s)
        with self.connection(bound) as conn, conn.pipeline():  # both statements in one round trip
            conn.execute("SELECT set_config('statement_timeout', %s, true)", (f"{round(bound * 1000)}ms",))
            cur = conn.execute(
                f"SELECT count(*), {_NOW} - min(since), "
                f"{_NOW} - min(claimed_at) FILTER (WHERE claimed_until > {_NOW}) FROM pending"
            )
            backlog, pending_s, claim_s = cur.fetchone()
        return Readiness(backlog, _age(pending_s), _age(claim_s))

    def unreachable(self) -> str | None:
        return self.pool.watch.down

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
            store_sql.finish(conn, POSTGRES, claim)

    def users(self, after: tuple[str, str] | None = None, limit: int = 1000) -> list[tuple[str, str]]:
        with self.connection() as conn:
            return store_sql.users(conn, POSTGRES, after, limit)

    def mark_pending(self, users: Sequence[tuple[str, str]]) -> int:
        """In (tenant, user) order, as every writer of `pending` locks one user: replicas marking the same
        users at once wait for each other instead of deadlocking, and the second marks none of them."""
        if not users:
            return 0
        with self.connection() as conn:
            return conn.execute(
                "INSERT INTO pending (tenant, user_id, mark, since) "
                f"SELECT g.tenant, g.user_id, nextval('pending_seq'), {_NOW} FROM generations g "
                "JOIN unnest(%s::text[], %s::text[]) AS u(tenant, user_id) "
                "ON g.tenant = u.tenant AND g.user_id = u.user_id ORDER BY g.tenant, g.user_id "
                "ON CONFLICT (tenant, user_id) DO NOTHING",
                ([t for t, _ in users], [u for _, u in users]),
            ).rowcount

    def snapshot(self, tenant: str, user: str, after: int = 0, limit: int | None = None) -> Snapshot:
        with self.connection() as conn:
            rows = conn.execute(  # one statement: the messages and the generation of one moment
                "SELECT g.generation, m.id, m.session_id, m.time, m.role, m.text, m.added, m.source "
                "FROM generations g "
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
        with self.connection(unbounded=True) as conn:
            unbounded_work(conn, self.wait_s)  # a deletion's work grows with its size
            _lock_user(conn, tenant, user)
            if ids is None:
                deleted = store_sql.delete_user(conn, POSTGRES, tenant, user)
                _drop_derived(conn, tenant, user, None)
                return deleted
            wanted = sorted(set(ids))
            mine = conn.execute(
                "SELECT id FROM messages WHERE tenant = %s AND user_id = %s AND id = ANY(%s)",
                (tenant, user, wanted),
            )
            check_known(wanted, (row[0] for row in mine))  # UnknownMessages: the connection rolls back
            rows = conn.execute(
                f"DELETE FROM messages WHERE tenant = %s AND id = ANY(%s) RETURNING {MESSAGE_COLUMNS}",
                (tenant, wanted),
            ).fetchall()
            gone = [StoredMessage(*row) for row in rows]
            _leave_tombstones(conn, tenant, user, gone)
            _drop_derived(conn, tenant, user, None if vector_keys is None else vector_keys(user, gone))
        return len(gone)

    def purge(
        self, tenant: str, before: float, vector_keys: VectorKeys | None = None
    ) -> dict[str, int] | None:
        """The users' idempotency keys stay until they expire."""
        with self.connection(unbounded=True) as conn:
            if not conn.execute("SELECT pg_try_advisory_xact_lock(%s)", (_PURGE_LOCK,)).fetchone()[0]:
                return None  # another replica is purging
            unbounded_work(conn, self.wait_s)  # a deletion's work grows with its size
            users = store_sql.users_before(conn, POSTGRES, tenant, before)
            for user in users:  # in order, as every deletion locks them
                _lock_user(conn, tenant, user)
            counts = {}
            for user in users:  # user by user: one user's deleted rows in memory at a time
                gone = store_sql.delete_before(conn, POSTGRES, tenant, user, before)
                _leave_tombstones(conn, tenant, user, gone)
                _drop_derived(conn, tenant, user, None if vector_keys is None else vector_keys(user, gone))
                counts[user] = len(gone)
        return counts

    def maintain(self) -> None:
        """lazymem/agent/postgres_maintenance.py: raises MaintenanceFailed when a step cannot be made."""
        with self.connection(unbounded=True) as conn:
            maintain(conn, self.idempotency_ttl_s, self.forgotten_ttl_s)

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


def _forgotten(conn: Connection, tenant: str, user: str, messages: Sequence[NewMessage]) -> set[str]:
    """The tombstones among the digests that say one of `messages` was forgotten (store.tombstone_checks)."""
    digests = [d for m in messages for d in tombstone_checks(m)]
    if not digests:
        return set()
    rows = conn.execute(
        "SELECT digest FROM forgotten WHERE tenant = %s AND user_id = %s AND digest = ANY(%s)",
        (tenant, user, digests),
    )
    return {digest for (digest,) in rows}


def _leave_tombstones(conn: Connection, tenant: str, user: str, gone: Sequence[StoredMessage]) -> None:
    digests = [d for m in gone for d in tombstones(m)]
    if digests:
        conn.execute(
            f"INSERT INTO forgotten (tenant, user_id, digest, created) SELECT %s, %s, d, {_NOW} "
            "FROM unnest(%s::text[]) AS d ON CONFLICT DO NOTHING",
            (tenant, user, digests),
        )


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
    left = store_sql.settle(conn, POSTGRES, tenant, user)
    drop_derived(conn, tenant, user, vectors if left else None)
    if left:
        conn.execute(
            "UPDATE generations SET generation = nextval('generation_seq') "
            "WHERE tenant = %s AND user_id = %s",
            (tenant, user),
        )
    conn.execute("UPDATE maintenance SET pending = true")


def _age(seconds: float | None) -> float | None:
    return None if seconds is None else max(0.0, seconds)
