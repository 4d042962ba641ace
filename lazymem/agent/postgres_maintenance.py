"""The PostgreSQL store's maintenance step: what makes past deletions final in the table files.

DELETE leaves dead tuples in a table's pages until they are vacuumed, so after deletions the step rewrites
every table that held message text or what is derived from it (VACUUM FULL) and takes a checkpoint; it also
deletes the expired idempotency keys and tombstones. One replica runs it at a time (an advisory lock). The
deletions stay marked (`maintenance.pending`) until the rewrite and the checkpoint have succeeded, and no
deletion marked them again meanwhile: a step that fails is done again by the next one.
"""

from __future__ import annotations

import psycopg
from psycopg import Connection

from lazymem.agent.errors import MaintenanceFailed
from lazymem.agent.schema import POSTGRES

MAINTAIN_LOCK = 72_003  # an advisory lock key (PostgresStore's others are 72_001 and 72_002)
# Every table that holds message text or what is derived from it
TEXT_TABLES = ("messages", "derived", "blocks", "generations", "pending")
_NOW = POSTGRES.now


def maintain(conn: Connection, idempotency_ttl_s: float, forgotten_ttl_s: float | None) -> None:
    """One maintenance step on `conn` (a pooled connection, taken out of its transaction here); nothing
    when another replica runs one, no rewrite when nothing was deleted since the last. Raises
    MaintenanceFailed when a table is not this role's or it may not CHECKPOINT."""
    conn.autocommit = True
    try:
        if not conn.execute("SELECT pg_try_advisory_lock(%s)", (MAINTAIN_LOCK,)).fetchone()[0]:
            return
        try:
            conn.execute("SET statement_timeout = 0")  # a rewrite takes as long as the table needs
            conn.execute(f"DELETE FROM idempotency WHERE created <= {_NOW} - %s", (idempotency_ttl_s,))
            if forgotten_ttl_s is not None:
                conn.execute(f"DELETE FROM forgotten WHERE created <= {_NOW} - %s", (forgotten_ttl_s,))
            # xmin: the transaction that last wrote the flag's row (a PostgreSQL system column), so that a
            # deletion committed during the rewrite keeps its mark
            pending, version = conn.execute("SELECT pending, xmin::text FROM maintenance").fetchone()
            if pending:
                _rewrite(conn)
                conn.execute(
                    "UPDATE maintenance SET pending = false WHERE pending AND xmin::text = %s", (version,)
                )
        finally:
            conn.execute("RESET statement_timeout")
            conn.execute("SELECT pg_advisory_unlock(%s)", (MAINTAIN_LOCK,))
    finally:
        conn.autocommit = False


def _rewrite(conn: Connection) -> None:
    """VACUUM FULL of every table that held message text, then CHECKPOINT. VACUUM skips a table the role
    does not own with a warning, not an error: such a warning fails the step here."""
    skipped: list[str] = []

    def note(diagnostic) -> None:
        if diagnostic.severity_nonlocalized == "WARNING" and "skipping" in (diagnostic.message_primary or ""):
            skipped.append(diagnostic.message_primary)

    conn.add_notice_handler(note)
    try:
        for table in TEXT_TABLES:
            conn.execute(f"VACUUM FULL {table}")
    finally:
        conn.remove_notice_handler(note)
    if skipped:
        raise MaintenanceFailed(
            f"VACUUM FULL skipped a table ({skipped[0]}): run the service as the owner of its tables"
        )
    try:
        conn.execute("CHECKPOINT")
    except psycopg.errors.InsufficientPrivilege:
        raise MaintenanceFailed(
            "CHECKPOINT was refused: grant the service's role pg_checkpoint (GRANT pg_checkpoint TO role; "
            "PostgreSQL 15 and later) or run it as a superuser"
        ) from None
