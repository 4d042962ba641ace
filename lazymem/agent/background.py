"""The service's background loops: retention purges, the store's maintenance step, indexing what was added,
and dropping derived data that another replica made stale. Each logs and survives its errors: one tenant's
failing purge never stops the others' (nor the next try), and /health says when retention and maintenance
last succeeded."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Iterable

from lazymem.agent.errors import MaintenanceFailed
from lazymem.agent.memory import Memory

log = logging.getLogger(__name__)


class Retention:
    """Purges every tenant that has `retention_days` every `every_s` seconds (at start-up first); after a
    failure, tries again in `retry_s` seconds. `Maintenance` makes the deletions final in the files.
    `tenants()` is read every round, so keys reloaded on SIGHUP (a new tenant, a changed retention) count
    from the next round on."""

    def __init__(self, memory: Memory, tenants: Callable[[], Iterable], every_s: float, retry_s: float):
        self.memory, self.every_s, self.retry_s = memory, every_s, retry_s
        self._tenants = tenants
        self.last_success: float | None = None  # unix time the last round finished without an error
        self.failing: set[str] = set()  # tenants whose last purge failed

    def tenants(self) -> list:
        """The tenants with a retention limit, as the keys say now."""
        return [t for t in self._tenants() if t.retention_days is not None]

    def status(self) -> dict:
        return {
            "tenants": len(self.tenants()),
            "last_success": self.last_success,
            "failing_tenants": len(self.failing),
        }

    async def run(self) -> None:
        while True:
            ok = await self.round()
            await asyncio.sleep(self.every_s if ok else self.retry_s)

    async def round(self) -> bool:
        """One purge of every tenant; whether every one succeeded."""
        ok = True
        for tenant in self.tenants():
            try:
                counts = await self.memory.apurge(tenant.retention_days, tenant=tenant.name)
            except Exception as e:  # noqa: BLE001 - logged, retried; the other tenants go on
                ok = False
                self.failing.add(tenant.name)
                log.error(
                    "retention: purging tenant %s failed (%s); retrying in %gs",
                    tenant.name,
                    _kind(e),
                    self.retry_s,
                )
                log.debug("retention failure", exc_info=True)
                continue
            self.failing.discard(tenant.name)
            if counts:
                log.info("retention: purged %d messages of tenant %s", sum(counts.values()), tenant.name)
        if ok:
            self.last_success = time.time()
        return ok


class Maintenance:
    """Every `every_s` seconds: the store's maintenance step, which makes the deletions since the last one
    (forgets and purges) final in its files. On PostgreSQL it rewrites the tables (VACUUM FULL, which
    locks each table while it runs) and takes a checkpoint, and does nothing when nothing was deleted; so
    `every_s` bounds how long a forgotten text can stay in a table file, and what the step costs is paid at
    most that often. On SQLite there is nothing to do."""

    def __init__(self, memory: Memory, every_s: float):
        self.memory, self.every_s = memory, every_s
        self.last_success: float | None = None  # unix time the step last finished
        self.last_failure: float | None = None  # unix time the step last failed
        self.error: str | None = None  # the kind of the last round's failure (None: it succeeded)

    def status(self) -> dict:
        """The last success and failure; `failing` while the last round failed (the deletions since the
        step last succeeded may still be in the store's files)."""
        return {
            "every_s": self.every_s,
            "last_success": self.last_success,
            "last_failure": self.last_failure,
            "failing": self.error is not None,
            "error": self.error,
        }

    async def run(self) -> None:
        while True:
            await asyncio.sleep(self.every_s)
            await self.round()

    async def round(self) -> bool:
        """One maintenance step; whether it succeeded. A failure is logged, with what to do when the store
        said it (MaintenanceFailed: the store's own words; another error's message may quote a row)."""
        try:
            await self.memory.amaintain()
        except Exception as e:  # noqa: BLE001 - logged; the next round tries again
            self.last_failure, self.error = time.time(), _kind(e)
            said = f": {e}" if isinstance(e, MaintenanceFailed) else ""
            log.error(
                "the store's maintenance step failed (%s%s); retrying in %gs", _kind(e), said, self.every_s
            )
            log.debug("maintenance failure", exc_info=True)
            return False
        self.last_success, self.error = time.time(), None
        return True


class Refresh:
    """Every `every_s` seconds: drop this replica's derived data of users another replica deleted
    messages of (queries check it themselves; this frees memory and scratch files at once)."""

    def __init__(self, memory: Memory, every_s: float):
        self.memory, self.every_s = memory, every_s

    async def run(self) -> None:
        while True:
            await asyncio.sleep(self.every_s)
            try:
                dropped = await self.memory.arefresh()
            except Exception as e:  # noqa: BLE001
                log.error("refresh of derived data failed (%s); retrying in %gs", _kind(e), self.every_s)
                log.debug("refresh failure", exc_info=True)
                continue
            if dropped:
                log.info("dropped the derived data of %d users changed by another process", dropped)


class Indexer:
    """Embeds added messages soon after they are written (Memory.aindex_pending): checks for pending users
    every `every_s` seconds while there are none."""

    def __init__(self, memory: Memory, every_s: float, lease_s: float):
        self.memory, self.every_s, self.lease_s = memory, every_s, lease_s

    async def run(self) -> None:
        while True:
            try:
                users = await self.memory.aindex_pending(self.lease_s)
            except Exception as e:  # noqa: BLE001 - the claim's lease runs out; this or another replica retries
                log.error("indexing failed (%s); retrying in %gs", _kind(e), self.every_s)
                log.debug("indexing failure", exc_info=True)
                users = 0
            if users:
                log.info("indexed the new messages of %d users", users)
            await asyncio.sleep(self.every_s)


class Reembed:
    """After a change of encoder, at start-up: marks the users whose vectors another encoder made for the
    indexer, a page at a time while its backlog is short, until no user holds any
    (Memory.reembedding, lazymem/agent/reembedding.py); then it stops. /health reports its `status`."""

    def __init__(self, memory: Memory, every_s: float, retry_s: float = 60.0):
        self.memory, self.every_s, self.retry_s = memory, every_s, retry_s

    def status(self) -> dict:
        return self.memory.reembedding.status()

    async def run(self) -> None:
        while True:
            try:
                await self.memory.reembedding.run(self.every_s)
                return
            except Exception as e:  # noqa: BLE001 - a store outage, say: the scan starts again later
                log.error("re-embedding failed (%s); retrying in %gs", _kind(e), self.retry_s)
                log.debug("re-embedding failure", exc_info=True)
            await asyncio.sleep(self.retry_s)


def _kind(e: BaseException) -> str:
    """An error's type, not its message: a database error may quote the row it failed on."""
    return type(e).__name__
