"""Two `lazymem serve` replicas on a PostgreSQL cluster of this test's own, which hangs under load: its
postmaster and backends stopped by SIGSTOP (scripts/bench_freeze.py, shortened). Every request sent while it
hangs is answered within agent.store.wait_s + about a second, with 503 and never a 500; /ready says so
within a second; clients that retry with their idempotency keys lose no acknowledged add and store none
twice; and no message whose forget was acknowledged comes back, in a query, an export or the table."""

from __future__ import annotations

import sys

import pytest
from postgres_cluster import new_cluster

from agent_helpers import Service
from helpers import ROOT

sys.path.insert(0, str(ROOT / "scripts"))  # the load and its checks live with the benchmark
from bench_freeze import run  # noqa: E402
from bench_outage import start_replicas  # noqa: E402

pytestmark = pytest.mark.slow
WAIT_S = 2.0


def test_a_hung_database_gets_bounded_answers_and_loses_nothing(tmp_path):
    with new_cluster() as cluster:
        dsn = cluster.new_database()
        services = start_replicas(Service, tmp_path, dsn, 2, WAIT_S)
        try:
            figures = run(cluster, dsn, [s.url for s in services], 4, 20, 6, WAIT_S)
        finally:
            for svc in services:
                svc.stop()
        logs = "".join(svc.log.read_text() for svc in services)
    assert figures["500s"] == 0 and "Traceback" not in logs, figures
    assert any(k.endswith(" 503") for k in figures["statuses"]), figures  # the freeze was felt
    assert figures["slowest_answer_sent_during_freeze_s"] <= WAIT_S + 1.5, figures
    assert figures["ready_status"] == 503 and figures["ready_s"] <= 1.5, figures
    assert figures["acknowledged"] > 20 and figures["acknowledged_lost"] == 0, figures
    assert figures["duplicates"] == 0 and figures["forgotten"] > 0, figures
    assert figures["forgotten_returned"] == 0, figures
