"""Client-side bounds on the PostgreSQL store's calls, and failing fast while the database is down.

A server-side statement timeout cannot fire while the server itself is frozen (its processes stopped, a
hung disk, a paused machine), and TCP keepalives cannot tell either: the server's kernel still acknowledges
every packet. So each use of a pooled connection is watched from this side:

- a bounded use (almost every call) ends at its deadline: the watchdog shuts its socket down, and the
  thread waiting on that socket gets an error at once instead of waiting for the server;
- an unbounded use (a deletion's or maintenance's work, a migration: as long as the work takes) is let
  run while the server is seen alive: once it has run `wait_s - PROBE_S` seconds, a probe checks that the
  server takes a new connection within PROBE_S, again each time that long has passed since the last
  success; when a probe fails, the use ends the same way.

`Watch` is also the circuit: the first call that finds the database down (a lost connection, no answer by
its deadline, no connection to be had) opens it, and until a probe in the background connects again
every call fails at once (`check`) instead of each waiting its `wait_s` in turn behind the others.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import psycopg

from lazymem.agent.errors import StoreUnavailable

log = logging.getLogger(__name__)

# Past its wait_s, a bounded use still waits this long: the server's own statement timeout (wait_s) and
# lock timeout normally answer first, with an error that says which
GRACE_S = 1.0
# How long a probe waits for a new connection: psycopg's shortest connect timeout (psycopg 3.3's
# conninfo.timeout_from_conninfo raises any connect_timeout below 2 to 2, as libpq does)
PROBE_S = 2.0
# Between two failed probes while the database is down
PROBE_EVERY_S = 0.5
_TICK_S = 0.05  # how often deadlines are looked at


@dataclass
class Use:
    """One use of a pooled connection: when it must end (None: unbounded), when the server was last seen
    alive during it, and why the watchdog ended it (None: it did not)."""

    conn: psycopg.Connection
    deadline: float | None
    alive_at: float
    limit_s: float | None = None  # the call's whole bound, which `deadline` ends (for the message)
    aborted: str | None = None


class Watch:
    """The watchdog and circuit of one pool. `probe()` opens and closes a new connection to the database
    (raising when it cannot within PROBE_S); `reason(what)` is `what` as a message that names the database,
    never its password."""

    def __init__(self, probe: Callable[[], None], wait_s: float, reason: Callable[[str], str]):
        self.probe, self.wait_s, self.reason = probe, wait_s, reason
        self.down: str | None = None  # why the database is known to be down (None: it is not)
        self._down_since = 0.0
        self._uses: dict[int, Use] = {}
        self._lock = threading.Lock()
        self._probing = False
        self._closed = threading.Event()
        self._work = threading.Event()  # set while there is something to watch
        self._thread = threading.Thread(target=self._run, name="lazymem-store-watch", daemon=True)
        self._thread.start()

    def check(self) -> None:
        """StoreUnavailable at once while the database is known to be down."""
        why = self.down
        if why is not None:
            age = time.monotonic() - self._down_since
            raise StoreUnavailable(
                self.reason(f"down for {age:.1f}s ({why}); failing fast until a probe connects again")
            )

    def trip(self, why: str) -> None:
        """The database was found down: fail fast until a probe connects again."""
        with self._lock:
            self._trip_locked(why)
        self._work.set()

    @contextmanager
    def use(
        self, conn: psycopg.Connection, deadline: float | None, limit_s: float | None = None
    ) -> Iterator[Use]:
        """Watch `conn` while the caller uses it: until `deadline` (monotonic time; None: unbounded), the
        end of a call bounded to `limit_s` seconds in all."""
        use = Use(conn, deadline, time.monotonic(), limit_s)
        with self._lock:
            self._uses[id(use)] = use
            if deadline is not None and deadline <= use.alive_at:
                self._abort(use, "no time left for it")
        self._work.set()
        try:
            yield use
        finally:
            with self._lock:  # ended: the watchdog no longer touches its connection
                self._uses.pop(id(use), None)

    def close(self) -> None:
        self._closed.set()
        self._work.set()
        self._thread.join(5)

    def _run(self) -> None:
        while not self._closed.is_set():
            self._work.wait()
            try:
                busy = self._tick()
            except Exception:  # noqa: BLE001 - the watchdog must outlive any one failure
                log.exception("the store's connection watchdog failed; going on")
                busy = True
            if not busy:
                self._work.clear()
                if self._uses or self.down is not None:  # raced with a new use: look again
                    self._work.set()
            time.sleep(_TICK_S)

    def _tick(self) -> bool:
        """End the uses past their deadline; start a probe when one is due. Whether anything is left to
        watch."""
        now = time.monotonic()
        with self._lock:
            for use in self._uses.values():
                if use.deadline is not None and now >= use.deadline and use.aborted is None:
                    self._abort(use, f"no answer within {use.limit_s or self.wait_s + GRACE_S:g}s")
                    self._trip_locked("a call got no answer in time")
            due = self.down is not None or any(
                use.deadline is None and now - use.alive_at >= max(0.0, self.wait_s - PROBE_S)
                for use in self._uses.values()
            )
            if due and not self._probing:
                self._probing = True
                threading.Thread(target=self._probe, name="lazymem-store-probe", daemon=True).start()
            return bool(self._uses) or self.down is not None

    def _probe(self) -> None:
        started = time.monotonic()
        try:
            self.probe()
        except Exception as e:  # noqa: BLE001 - any failure to connect means: not up
            why = first_line(e)
            with self._lock:
                self._trip_locked(f"a probe could not connect: {why}")
                for use in self._uses.values():  # unbounded work waits on a server that does not answer
                    if use.deadline is None and use.alive_at < started and use.aborted is None:
                        self._abort(use, f"the database stopped answering ({why})")
            time.sleep(PROBE_EVERY_S)
        else:
            with self._lock:
                if self.down is not None:
                    log.warning(self.reason(f"up again after {time.monotonic() - self._down_since:.1f}s"))
                self.down = None
                for use in self._uses.values():
                    use.alive_at = max(use.alive_at, started)
        finally:
            with self._lock:
                self._probing = False

    def _trip_locked(self, why: str) -> None:
        if self.down is None:
            self._down_since = time.monotonic()
            log.warning(self.reason(f"down ({why}); calls fail fast until it answers again"))
        self.down = why

    def _abort(self, use: Use, why: str) -> None:
        """End a use now: shut its socket down (the same open socket, through a duplicate descriptor), so
        the thread blocked on it wakes with a lost connection, which the pool then discards."""
        use.aborted = why
        try:
            fd = use.conn.pgconn.socket
            with socket.socket(fileno=os.dup(fd)) as dup:
                dup.shutdown(socket.SHUT_RDWR)
        except (OSError, psycopg.Error):
            pass  # closed already: its user has its error


def first_line(e: BaseException) -> str:
    """An error's first line: a driver's error spans lines."""
    lines = str(e).strip().splitlines()
    return lines[0] if lines else type(e).__name__
