"""The service's background loops (lazymem/agent/background.py): a purge that fails for one tenant is
logged and retried, never the end of purging; the maintenance step runs on its own schedule, whether or not
any tenant has retention; /health's numbers say so."""

from __future__ import annotations

import asyncio
import logging

from lazymem.agent.background import Maintenance, Refresh, Retention
from lazymem.agent.errors import MaintenanceFailed
from lazymem.agent.tenants import Tenant


class FlakyMemory:
    """Stands in for Memory's purge API only: tenant `broken` fails its first `failures` purges."""

    def __init__(self, failures: int, maintain_failures: int = 0):
        self.failures, self.purged, self.maintained = failures, [], 0
        self.maintain_failures = maintain_failures

    async def apurge(self, days, *, tenant):
        if tenant == "broken" and self.failures:
            self.failures -= 1
            raise OSError("disk I/O error near 'secret text'")
        self.purged.append(tenant)
        return {"u": 1}

    async def amaintain(self):
        if self.maintain_failures:
            self.maintain_failures -= 1
            raise OSError("could not rewrite 'secret text'")
        self.maintained += 1

    async def arefresh(self):
        raise RuntimeError("database went away")


def test_one_failing_tenant_neither_stops_the_others_nor_the_next_round(caplog):
    memory = FlakyMemory(failures=1)
    tenants = [Tenant("broken", 1.0), Tenant("fine", 1.0), Tenant("forever", None)]
    retention = Retention(memory, lambda: tenants, every_s=3600, retry_s=60)
    with caplog.at_level(logging.INFO, logger="lazymem.agent.background"):
        assert asyncio.run(retention.round()) is False
    assert memory.purged == ["fine"] and memory.maintained == 0  # maintenance is its own loop
    assert retention.status() == {"tenants": 2, "last_success": None, "failing_tenants": 1}
    failure = [r.getMessage() for r in caplog.records if r.levelno == logging.ERROR]
    assert failure == ["retention: purging tenant broken failed (OSError); retrying in 60s"]
    assert "secret text" not in caplog.text  # an error's type, never its message

    assert asyncio.run(retention.round()) is True
    status = retention.status()
    assert status["failing_tenants"] == 0 and status["last_success"] is not None
    assert memory.purged == ["fine", "broken", "fine"]


def test_the_loops_go_on_after_an_error(caplog):
    memory = FlakyMemory(failures=10**6)
    retention = Retention(memory, lambda: [Tenant("broken", 1.0)], every_s=0.01, retry_s=0.01)
    refresh = Refresh(memory, every_s=0.01)

    async def run_a_while():
        tasks = [asyncio.create_task(retention.run()), asyncio.create_task(refresh.run())]
        await asyncio.sleep(0.3)
        assert not any(t.done() for t in tasks)  # neither loop died of its errors
        for t in tasks:
            t.cancel()

    with caplog.at_level(logging.ERROR, logger="lazymem.agent.background"):
        asyncio.run(run_a_while())
    messages = [r.getMessage() for r in caplog.records]
    assert sum("purging tenant broken failed" in m for m in messages) >= 3
    assert sum("refresh of derived data failed (RuntimeError)" in m for m in messages) >= 3


def test_maintenance_runs_without_any_retention_and_survives_its_errors(caplog):
    memory = FlakyMemory(failures=0, maintain_failures=2)
    maintenance = Maintenance(memory, every_s=0.01)

    async def run_a_while():
        task = asyncio.create_task(maintenance.run())
        while memory.maintained < 3 and not task.done():
            await asyncio.sleep(0.01)
        assert not task.done()
        task.cancel()

    with caplog.at_level(logging.ERROR, logger="lazymem.agent.background"):
        asyncio.run(asyncio.wait_for(run_a_while(), 10))
    failures = [r.getMessage() for r in caplog.records]
    assert failures == ["the store's maintenance step failed (OSError); retrying in 0.01s"] * 2
    assert "secret text" not in caplog.text
    assert maintenance.status()["last_success"] is not None


def test_a_failing_maintenance_step_says_so_on_health_with_what_the_store_asks_for(caplog):
    class Refused:
        def __init__(self):
            self.refuse = True

        async def amaintain(self):
            if self.refuse:
                raise MaintenanceFailed("CHECKPOINT was refused: grant the service's role pg_checkpoint")

    memory = Refused()
    maintenance = Maintenance(memory, every_s=60)
    with caplog.at_level(logging.ERROR, logger="lazymem.agent.background"):
        assert asyncio.run(maintenance.round()) is False
    status = maintenance.status()
    assert status["failing"] and status["error"] == "MaintenanceFailed" and status["last_success"] is None
    assert "grant the service's role pg_checkpoint" in caplog.text  # the store's own words are logged
    memory.refuse = False
    assert asyncio.run(maintenance.round()) is True
    status = maintenance.status()
    assert not status["failing"] and status["error"] is None
    assert status["last_success"] >= status["last_failure"]
