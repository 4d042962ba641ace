"""Two `lazymem serve` replicas on a PostgreSQL cluster of this test's own, restarted and then stopped under
load (scripts/bench_outage.py, shortened): while the database is away every add and query gets 503 with
Retry-After within agent.store.wait_s + 1 s and never a 500, /ready says so within a second while /health
stays up, every replica takes adds again within 10 s of the database's return, and clients that retry
with their idempotency keys lose no acknowledged add and store none twice."""

from __future__ import annotations

import sys

import pytest
from postgres_cluster import new_cluster

from agent_helpers import Service
from helpers import ROOT

sys.path.insert(0, str(ROOT / "scripts"))  # the load and its checks live with the benchmark
from bench_outage import run, start_replicas  # noqa: E402

pytestmark = pytest.mark.slow
WAIT_S = 2.0


def test_a_restart_and_an_outage_lose_nothing_and_answer_503_not_500(tmp_path):
    with new_cluster() as cluster:
        dsn = cluster.new_database()
        services = start_replicas(Service, tmp_path, dsn, 2, WAIT_S)
        try:
            figures = run(cluster, dsn, [s.url for s in services], clients=4, seconds=20, outage_s=6)
        finally:
            for svc in services:
                svc.stop()
        logs = "".join(svc.log.read_text() for svc in services)
    statuses = figures["statuses"]
    assert statuses.get("500", 0) == 0 and "Traceback" not in logs, figures
    assert statuses.get("503", 0) > 0 and set(statuses) <= {"201", "503"}, figures
    assert figures["slowest_503_s"] <= WAIT_S + 1, figures
    assert figures["retry_after"] and "" not in figures["retry_after"], figures
    assert figures["ready_status"] == 503 and figures["ready_s"] <= 1.0, figures
    assert figures["health_status"] == 200, figures
    assert figures["query_status"] == 503 and figures["query_code"] == "store_unavailable", figures
    assert "127.0.0.1" not in figures["query_detail"]  # the database's address stays in the service's log
    assert figures["query_s"] <= WAIT_S + 1, figures
    assert all(r is not None and r <= 10 for r in figures["recovery_s"]), figures
    assert figures["acknowledged"] > 20 and figures["acknowledged_lost"] == 0, figures
    assert figures["duplicates"] == 0, figures
