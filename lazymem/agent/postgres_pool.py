"""The PostgreSQL store's connections: a psycopg pool whose faults are StoreUnavailable, not errors.

Every call is bounded on both sides. On the server, each statement of a connection has a timeout of
`wait_s`; from this side (lazymem/agent/postgres_watch.py) a call that has no answer `GRACE_S` after its
`wait_s` ends at once, since no server-side timeout fires while the server itself is frozen. A call that
gets no pooled connection within `wait_s`, whose connection breaks, or that runs past those bounds raises
StoreUnavailable. Once one call found the database down, every call fails at once until a probe in the
background connects again. A pooled connection is checked before each use, so one the server dropped while
it sat idle is replaced rather than failing a call. After an outage the pool reconnects by itself (see
`RECONNECT_S`). The messages name the server, never its password.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import psycopg
from psycopg import Connection
from psycopg.conninfo import conninfo_to_dict
from psycopg_pool import ConnectionPool, PoolClosed, PoolTimeout

from lazymem.agent.config_block import show
from lazymem.agent.errors import StoreUnavailable
from lazymem.agent.postgres_watch import GRACE_S, PROBE_S, Watch, first_line
from lazymem.validate import ConfigError

log = logging.getLogger(__name__)

# The pool retries a lost connection after 1, 2, 4 ... s until this many seconds, then gives up and connects
# anew when a call next needs one: so once the server is back after an outage, the next try comes within
# 4 s (its longest delay). psycopg_pool's default (300 s) let the delay grow to minutes: after outages of
# 40 and 90 s the first add came 15 to 31 s after the restart, and 0 to 3 s with this bound.
RECONNECT_S = 10.0
# SQLSTATE classes that mean the database cannot serve now, not that a call is wrong: connection
# exceptions, insufficient resources (too many connections, disk full), operator intervention (shutdown,
# statement timeout) and system errors (I/O)
_UNAVAILABLE_CLASSES = ("08", "53", "57", "58")
# Of those, what means the database is down rather than busy: a lost connection, a shutdown, an I/O error
_OUTAGE_CLASSES = ("08", "58")
_OUTAGE_STATES = ("57P01", "57P02", "57P03")  # admin_shutdown, crash_shutdown, cannot_connect_now
# The deadline of the call this thread is getting a connection for: the pool's check of the connection it
# lends runs in the caller's thread (psycopg_pool 3.3 pool.py, _getconn_with_check_loop)
_getting = threading.local()


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
        self._checking_all = threading.Lock()  # one check of every pooled connection at a time
        options = f"{params.get('options', '')} -c statement_timeout={round(wait_s * 1000)}".strip()
        self.watch = Watch(lambda: _probe(dsn), wait_s, self._reason)
        try:
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
        except BaseException:
            self.watch.close()
            raise

    @contextmanager
    def connection(self, wait_s: float | None = None, unbounded: bool = False) -> Iterator[Connection]:
        """A pooled connection in a transaction, committed at the end (rolled back on an error). No
        connection within `wait_s` (by default the pool's), one that fails, or no answer by `wait_s` plus
        `GRACE_S` (at most `wait_s` more) is StoreUnavailable; so is any call while the database is known
        to be down. `unbounded`: the work may take as long as it needs while the server answers (the caller
        lifts the statement timeout)."""
        wait_s = self.wait_s if wait_s is None else wait_s
        self.watch.check()
        limit = wait_s + min(GRACE_S, wait_s)
        deadline = time.monotonic() + limit
        _getting.deadline, _getting.limit = deadline, limit
        try:
            conn = self.pool.getconn(timeout=wait_s)
        except PoolTimeout as e:
            down = self._connect_error or self.watch.down
            why = down or f"all {self.pool.max_size} connections busy"
            if down:
                self.watch.trip(down)
            raise StoreUnavailable(
                self._reason(f"no connection within {wait_s:g}s ({why})"), outage=down is not None
            ) from e
        finally:
            _getting.deadline = None
        try:
            with self.watch.use(conn, None if unbounded else deadline, limit) as use:
                try:
                    with conn:  # the transaction: committed or rolled back while still watched
                        yield conn
                except psycopg.OperationalError as e:
                    if use.aborted is not None:
                        raise StoreUnavailable(self._reason(use.aborted)) from e
                    if not unavailable(e):
                        raise
                    if outage(e):
                        self.watch.trip(first_line(e))
                    raise StoreUnavailable(self._reason(first_line(e)), outage=outage(e)) from e
        finally:
            self.pool.putconn(conn)

    def close(self) -> None:
        self.pool.close()
        self.watch.close()

    def _check(self, conn: Connection) -> None:
        """The pool's check of a connection before it lends it, watched to the deadline of the call that
        asked for it. A broken one (the server dropped it) means the others are likely broken too: they are
        all checked at once, in the background (a check waits on the server, which may not answer), rather
        than one per try with the pool's back-off between tries."""
        deadline, limit = getattr(_getting, "deadline", None), getattr(_getting, "limit", None)
        if deadline is None:  # a check outside a call (none in psycopg_pool 3.3): the pool's own bound
            limit = self.wait_s + GRACE_S
            deadline = time.monotonic() + limit
        with self.watch.use(conn, deadline, limit) as use:
            try:
                ConnectionPool.check_connection(conn)
            except psycopg.Error:
                if use.aborted is None:
                    self._check_all()
                raise

    def _check_all(self) -> None:
        if not self._checking_all.acquire(blocking=False):
            return

        def check() -> None:
            try:
                self.pool.check()
            except Exception:  # noqa: BLE001 - a failed check only leaves broken ones for the next borrower
                log.debug("checking the pooled connections failed", exc_info=True)
            finally:
                self._checking_all.release()

        threading.Thread(target=check, name="lazymem-store-check", daemon=True).start()

    def _note_connect(self, error: str | None) -> None:
        self._connect_error = error

    def _reason(self, what: str) -> str:
        reason = f"{self.where}: {what}"
        return reason.replace(self._password, "***") if self._password else reason


def unbounded_work(conn: Connection, wait_s: float) -> None:
    """For the rest of `conn`'s transaction (a `connection(unbounded=True)`): no statement timeout, but a
    wait for another transaction's lock still ends after `wait_s`."""
    conn.execute(
        "SELECT set_config('statement_timeout', '0', true), set_config('lock_timeout', %s, true)",
        (f"{round(wait_s * 1000)}ms",),
    )


def check_dsn(dsn: Any, key: str) -> None:
    """A connection string that parses, as the pool will parse it (ConfigError naming `key`); never quoted
    back, as it may hold a password."""
    expected = f"{key}: expected a PostgreSQL connection string such as postgresql://USER@HOST:PORT/DB"
    if not isinstance(dsn, str) or not dsn.strip():
        shown = show(dsn) if dsn is None or isinstance(dsn, str) else type(dsn).__name__  # blank or no text
        raise ConfigError([f"{expected} (agent/store=postgres needs one), got {shown}"])
    try:
        conninfo_to_dict(dsn)
    except psycopg.ProgrammingError:
        raise ConfigError(
            [f"{expected}; this one does not parse (not shown: it may hold a password)"]
        ) from None


def unavailable(e: psycopg.OperationalError) -> bool:
    """Whether an error means the database cannot serve now (StoreUnavailable) rather than a bug: a lost
    connection (no SQLSTATE), one of _UNAVAILABLE_CLASSES, or a lock wait past lock_timeout. Deadlocks and
    serialization failures are not: the store's lock order should make them impossible."""
    if isinstance(e, PoolClosed):
        return False  # used after close()
    if isinstance(e, psycopg.errors.LockNotAvailable):
        return True
    return e.sqlstate is None or e.sqlstate[:2] in _UNAVAILABLE_CLASSES


def outage(e: psycopg.OperationalError) -> bool:
    """Whether an error that makes the store unavailable means the database is down (a lost connection, a
    shutdown, an I/O error), not busy (a lock or statement timeout, too many connections: it answered)."""
    state = e.sqlstate
    return state is None or state[:2] in _OUTAGE_CLASSES or state in _OUTAGE_STATES


def _probe(dsn: str) -> None:
    """A new connection, opened and closed: whether the database serves (raises when it does not within
    PROBE_S)."""
    psycopg.connect(dsn, connect_timeout=PROBE_S, autocommit=True).close()


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
