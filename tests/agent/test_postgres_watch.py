"""The PostgreSQL store while its server hangs (lazymem/agent/postgres_watch.py): with the postmaster and
its backends stopped by SIGSTOP, no server-side timeout fires and the kernel still acknowledges, so only
the client can bound a call. Every call answers within wait_s + about a second, the ones after the first
at once, the deletions' unbounded work ends once a probe finds the server gone, and everything works again
soon after the server continues. Also: a waiter for a user's lock gives up as soon as the store is known
to be down, and a long deletion on a live server is never cut short."""

from __future__ import annotations

import asyncio
import threading
import time

import pytest

from lazymem.agent.errors import StoreUnavailable
from lazymem.agent.open_users import UserLock
from lazymem.agent.postgres_store import PostgresStore
from lazymem.agent.postgres_watch import GRACE_S, PROBE_S
from lazymem.agent.store import Idempotency, NewMessage

WAIT_S = 2.0


def new(*texts: str) -> list[NewMessage]:
    return [NewMessage("user", t, "t0", "s") for t in texts]


def timed(call) -> tuple[float, BaseException | None]:
    started = time.monotonic()
    try:
        call()
    except BaseException as e:  # noqa: BLE001 - the caller looks at it
        return time.monotonic() - started, e
    return time.monotonic() - started, None


def test_a_frozen_server_gets_answers_within_the_bound_and_the_store_recovers(own_postgres):
    store = PostgresStore(own_postgres.new_database(), pool_size=4, wait_s=WAIT_S)
    first = store.add("t", "u", new("before"))
    key = Idempotency("k-during", "d")
    with own_postgres.frozen():
        took, error = timed(lambda: store.add("t", "u", new("during"), key))
        assert isinstance(error, StoreUnavailable) and error.outage, error
        assert WAIT_S <= took <= WAIT_S + GRACE_S + 0.5, took
        assert "no answer within 3s" in str(error) or "no connection" in str(error)
        for call in (
            lambda: store.snapshot("t", "u"),
            lambda: store.ready(),
            lambda: store.forget("t", "u", first.ids),
            lambda: store.add("t", "u", new("during"), key),
        ):  # known to be down: at once
            took, error = timed(call)
            assert isinstance(error, StoreUnavailable) and took < 0.2, (took, error)
        assert store.unreachable() is not None
    continued = time.monotonic()
    while True:  # a retry with the add's key: stored once, whether or not the first reached the server
        try:
            again = store.add("t", "u", new("during"), key)
            break
        except StoreUnavailable:
            assert time.monotonic() - continued < 10
            time.sleep(0.1)
    print(f"first add {time.monotonic() - continued:.2f}s after the server continued")
    assert [m.text for m in store.snapshot("t", "u").messages] == ["before", "during"]
    assert store.add("t", "u", new("during"), key).ids == again.ids and store.unreachable() is None
    store.close()


def test_unbounded_work_runs_past_wait_s_on_a_live_server_and_ends_when_it_freezes(own_postgres):
    store = PostgresStore(own_postgres.new_database(), pool_size=2, wait_s=WAIT_S)

    def sleep(seconds: float) -> None:
        with store.pool.connection(unbounded=True) as conn:
            conn.execute("SET statement_timeout = 0")
            conn.execute("SELECT pg_sleep(%s)", (seconds,))

    took, error = timed(lambda: sleep(WAIT_S + 2))  # a long deletion's work: probes find the server alive
    assert error is None and took >= WAIT_S + 2, (took, error)

    result: dict = {}
    worker = threading.Thread(
        target=lambda: result.update(zip(("took", "error"), timed(lambda: sleep(30)), strict=True))
    )
    worker.start()
    time.sleep(0.5)
    with own_postgres.frozen():
        frozen_at = time.monotonic()
        worker.join(PROBE_S + WAIT_S + 2)
        ended = time.monotonic() - frozen_at
    assert not worker.is_alive() and isinstance(result["error"], StoreUnavailable), result
    assert ended <= PROBE_S + 1.5, ended
    assert "stopped answering" in str(result["error"])
    store.close()


def test_a_waiter_for_a_users_lock_gives_up_once_the_store_is_down():
    down: list[str] = []

    async def go():
        lock = asyncio.Lock()
        holder = UserLock(lock, lambda: down[0] if down else None)
        await holder.__aenter__()
        waiter = asyncio.ensure_future(UserLock(lock, lambda: down[0] if down else None).__aenter__())
        await asyncio.sleep(0.3)
        assert not waiter.done()  # the store is fine: it waits for the holder
        down.append("no answer within 3s")
        started = time.monotonic()
        with pytest.raises(StoreUnavailable, match="gave up waiting for the user's previous call"):
            await waiter
        assert time.monotonic() - started < 0.3
        await holder.__aexit__(None, None, None)
        down.clear()
        async with UserLock(lock, lambda: None):  # the lock was not left held by the waiter
            assert lock.locked()
        assert not lock.locked()

    asyncio.run(go())
