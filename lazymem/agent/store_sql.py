"""The statements both stores run alike, written once over the schema's `Dialect` (its `mark` is the query
parameter: SQLite's `?`, psycopg's `%s`). Each takes a connection the store opened (a transaction where it
writes) and returns what the store's method returns; what differs between the databases (upserts, locks,
counters, the time) stays in lazymem/agent/sqlite_store.py and lazymem/agent/postgres_store.py.
"""

from __future__ import annotations

from typing import Any

from lazymem.agent.schema import MESSAGE_COLUMNS, VERSION, Dialect, steps_after
from lazymem.agent.store import Claim, StoredMessage

# The one row that says which schema version a database holds
VERSION_TABLE = "CREATE TABLE IF NOT EXISTS schema_version (version INTEGER NOT NULL)"


def migrate(conn: Any, dialect: Dialect, where: str) -> None:
    """Create the schema, or bring a database of an earlier version to schema.VERSION, in the caller's
    transaction; a RuntimeError naming `where` when it is newer than this lazymem."""
    conn.execute(VERSION_TABLE)
    row = conn.execute("SELECT version FROM schema_version").fetchone()
    statements = steps_after(0 if row is None else row[0], dialect, where)
    if not statements:
        return
    for statement in statements:
        conn.execute(statement)
    conn.execute("DELETE FROM schema_version")
    conn.execute(f"INSERT INTO schema_version (version) VALUES ({dialect.mark})", (VERSION,))


def reserve_ids(conn: Any, dialect: Dialect, tenant: str, n: int) -> int:
    """The first of `n` consecutive ids of the tenant's own counter, whose row the add's transaction now
    holds: a concurrent add of the tenant waits for it to commit."""
    p = dialect.mark
    (last,) = conn.execute(
        f"INSERT INTO tenant_ids (tenant, last_id) VALUES ({p}, {p}) ON CONFLICT (tenant) "
        "DO UPDATE SET last_id = tenant_ids.last_id + excluded.last_id RETURNING last_id",
        (tenant, n),
    ).fetchone()
    return last - n + 1


def finish(conn: Any, dialect: Dialect, claim: Claim) -> None:
    """The claimed user is indexed up to the claim's mark (`Store.finish`)."""
    p = dialect.mark
    conn.execute(
        f"DELETE FROM pending WHERE tenant = {p} AND user_id = {p} AND mark = {p}",
        (claim.tenant, claim.user, claim.mark),
    )
    conn.execute(  # added to since the claim: pending again (since then), for whoever comes next
        "UPDATE pending SET claimed_until = 0, since = COALESCE(claimed_at, since), "
        f"claimed_at = NULL WHERE tenant = {p} AND user_id = {p}",
        (claim.tenant, claim.user),
    )


def users(conn: Any, dialect: Dialect, after: tuple[str, str] | None, limit: int) -> list[tuple[str, str]]:
    """A page of the users who have messages (`Store.users`)."""
    p = dialect.mark
    where, args = (f"WHERE (tenant, user_id) > ({p}, {p}) ", after) if after is not None else ("", ())
    rows = conn.execute(
        f"SELECT tenant, user_id FROM generations {where}ORDER BY tenant, user_id LIMIT {p}",
        (*args, limit),
    ).fetchall()
    return [(tenant, user) for tenant, user in rows]


def delete_user(conn: Any, dialect: Dialect, tenant: str, user: str) -> int:
    """Deletes every message of the user, with the user's idempotency keys and tombstones; how many
    messages. The user's generation is the caller's to settle (`settle`)."""
    p, owner = dialect.mark, (tenant, user)
    deleted = conn.execute(f"DELETE FROM messages WHERE tenant = {p} AND user_id = {p}", owner).rowcount
    conn.execute(f"DELETE FROM idempotency WHERE tenant = {p} AND user_id = {p}", owner)
    conn.execute(f"DELETE FROM forgotten WHERE tenant = {p} AND user_id = {p}", owner)
    return deleted


def users_before(conn: Any, dialect: Dialect, tenant: str, before: float) -> list[str]:
    """The tenant's users with messages added before `before` (unix time), sorted: what a purge deletes."""
    p = dialect.mark
    rows = conn.execute(
        f"SELECT DISTINCT user_id FROM messages WHERE tenant = {p} AND added < {p} ORDER BY user_id",
        (tenant, before),
    ).fetchall()
    return [user for (user,) in rows]


def delete_before(conn: Any, dialect: Dialect, tenant: str, user: str, before: float) -> list[StoredMessage]:
    """Deletes the user's messages added before `before`; the deleted messages, oldest first."""
    p = dialect.mark
    rows = conn.execute(
        f"DELETE FROM messages WHERE tenant = {p} AND user_id = {p} AND added < {p} "
        f"RETURNING {MESSAGE_COLUMNS}",
        (tenant, user, before),
    ).fetchall()
    return [StoredMessage(*row) for row in sorted(rows)]  # by id: RETURNING promises no order


def settle(conn: Any, dialect: Dialect, tenant: str, user: str) -> bool:
    """After a deletion: whether the user has messages left. A user with none loses their generation and
    pending rows (no row keeps the id of a forgotten user); one with some gets a new generation from the
    caller."""
    p, owner = dialect.mark, (tenant, user)
    left = conn.execute(f"SELECT 1 FROM messages WHERE tenant = {p} AND user_id = {p} LIMIT 1", owner)
    if left.fetchone() is not None:
        return True
    conn.execute(f"DELETE FROM generations WHERE tenant = {p} AND user_id = {p}", owner)
    conn.execute(f"DELETE FROM pending WHERE tenant = {p} AND user_id = {p}", owner)
    return False
