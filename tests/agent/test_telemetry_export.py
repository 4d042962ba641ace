"""lazymem.agent.telemetry_export: a collector that is down costs a request no time, its failure is logged
once without the endpoint's credentials, and the OTLP exporters' own log lines are dropped.
tests/e2e/test_telemetry_collector.py exports to a real collector from `lazymem serve` and `lazymem mcp`."""

from __future__ import annotations

import logging
import time

from lazymem.agent.settings import TelemetrySettings
from lazymem.agent.telemetry import Telemetry

from agent_helpers import free_port


def test_a_collector_that_is_down_costs_no_request_time_and_is_logged_once(caplog):
    port = free_port()  # nothing listens there
    settings = TelemetrySettings(
        enabled=True, endpoint=f"http://user:hunter2@127.0.0.1:{port}", metrics_every_s=0.2, timeout_s=0.5
    )
    caplog.set_level(logging.DEBUG)
    telemetry = Telemetry.from_settings(settings)
    start = time.perf_counter()
    for _ in range(500):
        with telemetry.operation("create_memory", "t", "u", 1) as op:
            op.done(None, stored=1)
    assert time.perf_counter() - start < 1.0  # the spans wait in the batch queue, not in the call
    time.sleep(1.0)  # a few metric exports fail meanwhile
    start = time.perf_counter()
    telemetry.close()
    assert time.perf_counter() - start < 5.0  # the last flush gives up after timeout_s a signal
    ours = [r for r in caplog.records if r.name == "lazymem.agent.telemetry"]
    assert len(ours) == 1 and ours[0].levelno == logging.WARNING, [r.getMessage() for r in ours]
    assert f"http://127.0.0.1:{port}" in ours[0].getMessage()
    assert not [r for r in caplog.records if r.name.startswith("opentelemetry.exporter")]
    assert not [r for r in caplog.records if "hunter2" in r.getMessage()]
