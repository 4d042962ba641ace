"""Where the agent memory's work runs (lazymem/agent/runtime.py): store calls and embedding in threads of
their own, the sync API on a private loop, and an async iterator walked from sync code and closed there."""

from __future__ import annotations

import asyncio
import re
import threading

import pytest

from lazymem.agent.runtime import Runtime, utc_now


def test_each_kind_of_work_runs_in_its_own_threads():
    runtime = Runtime(store_threads=2)

    async def where() -> tuple[str, str, str]:
        name = lambda: threading.current_thread().name  # noqa: E731
        return await runtime.on_store(name), await runtime.on_indexer(name), name()

    store, indexer, loop = runtime.run(where())
    assert store.startswith("lazymem-store") and indexer.startswith("lazymem-index")
    assert loop == "lazymem-memory" and runtime.to_indexer(lambda: 7).result() == 7
    runtime.close()
    with pytest.raises(RuntimeError):  # closed: no more work is taken
        runtime.to_indexer(lambda: 7)


def test_the_sync_form_runs_on_one_loop_and_raises_what_the_coroutine_raised():
    runtime = Runtime()

    async def loop() -> asyncio.AbstractEventLoop:
        return asyncio.get_running_loop()

    async def fails() -> None:
        raise KeyError("kim")

    assert runtime.run(loop()) is runtime.run(loop())
    with pytest.raises(KeyError, match="kim"):
        runtime.run(fails())
    runtime.close()


def test_an_async_iterator_walked_from_sync_code_is_closed_when_the_walk_stops_early():
    runtime = Runtime()
    closed = []

    async def pages():
        try:
            for n in range(5):
                yield n
        finally:
            closed.append(threading.current_thread().name)

    assert list(runtime.iterate(pages())) == [0, 1, 2, 3, 4] and closed == ["lazymem-memory"]
    walk = runtime.iterate(pages())
    assert next(walk) == 0 and len(closed) == 1
    walk.close()  # the consumer stopped after one item: the generator's finally ran, on the loop
    assert closed == ["lazymem-memory", "lazymem-memory"]
    runtime.close()


def test_the_current_time_is_written_in_utc():
    assert re.fullmatch(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC", utc_now())
