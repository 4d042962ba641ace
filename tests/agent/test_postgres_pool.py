"""The PostgreSQL store's connections (lazymem/agent/postgres_pool.py) on a real, throwaway cluster: a
connection the server dropped is replaced without an error, a pool with every connection busy or an
outage is StoreUnavailable naming the server but never its password, and calls succeed soon after the
server is back."""

from __future__ import annotations

import time

import psycopg
import pytest

from lazymem.agent.errors import StoreUnavailable
from lazymem.agent.postgres_pool import Pool, unavailable
from lazymem.agent.postgres_store import PostgresStore
from lazymem.agent.store import NewMessage


def new(*texts: str) -> list[NewMessage]:
    return [NewMessage("user", t, "2025-01-01", "s1") for t in texts]


@pytest.fixture
def store(pg_dsn):
    s = PostgresStore(pg_dsn, pool_size=4)
    yield s
    s.close()


def test_a_busy_pool_is_store_unavailable_and_a_sql_error_is_not(pg_dsn):
    # trust authentication ignores the password: it is there to be kept out of the errors
    pool = Pool(pg_dsn.replace("lazymem@", "lazymem:pw-s3cret@"), size=1, wait_s=0.3)
    with pool.connection() as conn:
        assert conn.execute("SELECT 1").fetchone() == (1,)
        with pytest.raises(StoreUnavailable) as caught, pool.connection():
            pass
    reason = str(caught.value)
    assert "no connection within 0.3s (all 1 connections busy)" in reason and "s3cret" not in reason
    assert reason.startswith("PostgreSQL at ")
    with pytest.raises(psycopg.errors.UndefinedTable), pool.connection() as conn:
        conn.execute("SELECT * FROM no_such_table")  # a bug, not an outage: raised as it is
    pool.close()


def test_which_errors_mean_the_database_cannot_serve_now():
    assert unavailable(psycopg.OperationalError("connection lost"))  # no SQLSTATE: the connection broke
    assert unavailable(psycopg.errors.QueryCanceled())  # 57014: the statement timeout
    assert unavailable(psycopg.errors.LockNotAvailable())  # 55P03: lock_timeout
    assert not unavailable(psycopg.errors.DeadlockDetected())


def test_pooled_connections_the_server_dropped_are_replaced_without_an_error(store, pg_dsn):
    held = [store.pool.pool.getconn() for _ in range(4)]  # four connections wait in the pool
    for conn in held:
        store.pool.pool.putconn(conn)
    with psycopg.connect(pg_dsn, autocommit=True) as admin:
        others = "FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid()"
        assert admin.execute(f"SELECT COUNT(pg_terminate_backend(pid)) {others}").fetchone() == (4,)
        _wait_until(lambda: admin.execute(f"SELECT COUNT(*) {others}").fetchone() == (0,))
    started = time.monotonic()
    assert store.add("t", "u", new("after")).stored == 1
    assert [m.text for m in store.snapshot("t", "u").messages] == ["after"]
    assert time.monotonic() - started < 1


def test_an_outage_is_store_unavailable_and_adds_succeed_soon_after_the_restart(own_postgres):
    # trust authentication ignores the password: it is there to be kept out of the errors
    dsn = own_postgres.new_database().replace("lazymem@", "lazymem:pw-s3cret@")
    store = PostgresStore(dsn, pool_size=4, wait_s=2)
    store.add("t", "u", new("before"))
    own_postgres.stop()
    started = time.monotonic()
    with pytest.raises(StoreUnavailable) as caught:
        store.add("t", "u", new("during"))
    assert time.monotonic() - started < 2 + 1
    reason = str(caught.value)
    assert "no connection within 2s" in reason and "refused" in reason and "s3cret" not in reason
    assert "\n" not in reason and caught.value.retry_after_s > 0 and caught.value.outage
    # the database is known to be down now: the next calls fail at once, not after wait_s each
    for call in (lambda: store.add("t", "u", new("during")), lambda: store.snapshot("t", "u")):
        started = time.monotonic()
        with pytest.raises(StoreUnavailable, match="down for .*refused.*failing fast") as caught:
            call()
        assert time.monotonic() - started < 0.1 and "s3cret" not in str(caught.value)
    assert "refused" in store.unreachable()
    started = time.monotonic()
    with pytest.raises(StoreUnavailable, match="no connection within 1s"):  # a store started now
        PostgresStore(dsn, wait_s=1)
    assert time.monotonic() - started < 2
    # an outage of some 15 s: long enough for psycopg_pool's default back-off (tries 1, 2, 4, 8, 16 s
    # apart for 5 minutes) to leave the next try over 10 s after the restart
    time.sleep(10)
    own_postgres.start(init=False)
    restarted = time.monotonic()
    while True:
        try:
            store.add("t", "u", new("after"))
            break
        except StoreUnavailable:
            assert time.monotonic() - restarted < 10
            time.sleep(0.1)
    print(f"first add {time.monotonic() - restarted:.2f}s after the restart")
    assert [m.text for m in store.snapshot("t", "u").messages] == ["before", "after"]
    store.close()


def _wait_until(condition, timeout_s: float = 10.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.02)
