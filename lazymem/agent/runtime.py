"""Where the agent memory's work runs: one indexer thread, a pool of threads for store calls, and the private
event loop on which the sync API runs the async one."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator, Callable, Coroutine, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from datetime import UTC, datetime
from typing import Any

STORE_THREADS = 64  # store calls at once: those over the store's own pool wait in its queue, bounded
_END: Any = object()  # what `iterate` gets once the items are exhausted


class Runtime:
    """The threads and the loop of one Memory, closed with it."""

    def __init__(self, store_threads: int = STORE_THREADS):
        # Embedding runs in this one thread: it is CPU-bound, and the embedding caches' SQLite connections
        # must stay in the thread that opened them.
        self._indexer = ThreadPoolExecutor(1, thread_name_prefix="lazymem-index")
        # Store calls run in threads of their own: one waiting for the database (up to agent.store.wait_s)
        # must not hold up the calls behind it, as it would in asyncio's default executor (cores + 4)
        self._store_threads = ThreadPoolExecutor(store_threads, thread_name_prefix="lazymem-store")
        self._loop: asyncio.AbstractEventLoop | None = None
        self._loop_lock = threading.Lock()

    def run(self, coro: Coroutine[Any, Any, Any]) -> Any:
        """Run `coro` to its end on the private loop (started on first use) and return its result."""
        with self._loop_lock:
            if self._loop is None:
                self._loop = asyncio.new_event_loop()
                threading.Thread(target=self._loop.run_forever, name="lazymem-memory", daemon=True).start()
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result()

    def iterate(self, items: AsyncIterator[Any]) -> Iterator[Any]:
        """An async iterator's items, each one fetched on the private loop; it is closed there too."""

        async def next_item() -> Any:
            return await anext(items, _END)

        try:
            while (item := self.run(next_item())) is not _END:
                yield item
        finally:
            self.run(items.aclose())

    async def on_store(self, call: Callable[..., Any], *args: Any) -> Any:
        return await asyncio.get_running_loop().run_in_executor(self._store_threads, call, *args)

    async def on_indexer(self, call: Callable[..., Any], *args: Any) -> Any:
        return await asyncio.get_running_loop().run_in_executor(self._indexer, call, *args)

    def to_indexer(self, call: Callable[..., Any], *args: Any) -> Future:
        """`call` queued on the indexer thread, from code that does not wait for it."""
        return self._indexer.submit(call, *args)

    def close(self) -> None:
        """Wait for the queued work, then stop the threads and the loop."""
        self._indexer.shutdown()
        self._store_threads.shutdown()
        if self._loop is not None:
            self._loop.call_soon_threadsafe(self._loop.stop)


def utc_now() -> str:
    """The current time as a message's or a question's default `time`."""
    return datetime.now(UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
