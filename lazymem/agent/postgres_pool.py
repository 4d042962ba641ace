"""The PostgreSQL store's connections: a psycopg pool whose faults are StoreUnavailable, not errors.

A call that gets no pooled connection within `wait_s`, whose connection breaks, or whose statement runs
past `wait_s` (the statement timeout) raises StoreUnavailable; a pooled connection is checked before each
use, so one the server dropped while it sat idle is replaced rather than failing a call. After an outage
the pool reconnects by itself (see `RECONNECT_S`). The messages name the server, never its password.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import psycopg
from psycopg import Connection
from psycopg.conninfo import conninfo_to_dict
from psycopg_pool import ConnectionPool, PoolClosed, PoolTimeout

from lazymem.agent.errors import StoreUnavailable

# The pool retries a lost connection after 1, 2, 4 ... s until this many seconds, then gives up and connects
# anew when a call next needs one: so once the server is back after an outage, the next try comes within
# 4 s (its longest delay). psycopg_pool's default (300 s) let the delay grow to minutes: after outages of
# 40 and 90 s the first add came 15 to 31 s after the restart, and 0 to 3 s with this bound.
RECONNECT_S = 10.0
# SQLSTATE classes that mean the database cannot serve now, not that a call is wrong: connection
# exceptions, insufficient resources (too many connections, disk full), operator intervention (shutdown,
# statement timeout) and system errors (I/O)
_UNAVAILABLE_CLASSES = ("08", "53", "57", "58")


class Pool:
    """At most `size` connections to `dsn`, each with a statement timeout of `wait_s`."""

    def __init__(self, dsn: str, size: int, wait_s: float):
        self.wait_s = wait_s
        params = conninfo_to_dict(dsn)
        self.where = "PostgreSQL at {}:{}/{}".format(
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
            max_size=size,
            timeout=wait_s,
            check=self._check,
            reconnect_timeout=RECONNECT_S,
            open=True,
            name="lazymem-store",
        )

    @contextmanager
    def connection(self, wait_s: float | None = None) -> Iterator[Connection]:
        """A pooled connection in a transaction, committed at the end (rolled back on an error). No
        connection within `wait_s` (by default the pool's), or one that fails, is StoreUnavailable."""
        wait_s = self.wait_s if wait_s is None else wait_s
        try:
            with self.pool.connection(timeout=wait_s) as conn:
                yield conn
        except PoolTimeout as e:
            why = self._connect_error or f"all {self.pool.max_size} connections busy"
            raise StoreUnavailable(self._reason(f"no connection within {wait_s:g}s ({why})")) from e
        except psycopg.OperationalError as e:
            if not unavailable(e):
                raise
            raise StoreUnavailable(self._reason(first_line(e))) from e

    def close(self) -> None:
        self.pool.close()

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
        reason = f"{self.where}: {what}"
        return reason.replace(self._password, "***") if self._password else reason


def unavailable(e: psycopg.OperationalError) -> bool:
    """Whether an error means the database cannot serve now (StoreUnavailable) rather than a bug: a lost
    connection (no SQLSTATE), one of _UNAVAILABLE_CLASSES, or a lock wait past lock_timeout. Deadlocks and
    serialization failures are not: the store's lock order should make them impossible."""
    if isinstance(e, PoolClosed):
        return False  # used after close()
    if isinstance(e, psycopg.errors.LockNotAvailable):
        return True
    return e.sqlstate is None or e.sqlstate[:2] in _UNAVAILABLE_CLASSES


def first_line(e: BaseException) -> str:
    lines = str(e).strip().splitlines()
    return lines[0] if lines else type(e).__name__


def _noting_connects(note: Callable[[str | None], None]) -> type[Connection]:
    """A connection class whose connects tell `note` why they failed (None once one succeeds), so that a
    pool timeout can say why it got no connection."""

    class NotingConnection(Connection):
        @classmethod
        def connect(cls, conninfo: str = "", **kwargs: Any) -> NotingConnection:
            try:
                conn = super().connect(conninfo, **kwargs)
            except psycopg.OperationalError as e:
                note(first_line(e))
                raise
            note(None)
            return conn

    return NotingConnection
