"""Sending the agent memory's telemetry over OTLP/HTTP: the exporters `Telemetry.from_settings` builds.

Exporting runs in the SDK's threads, never in a request's: a collector that is down or slow loses telemetry,
not requests. Its failure is logged once (then once more when exporting works again), naming the endpoint
without credentials; the OTLP exporters' own log lines, repeated at every batch, are dropped. Nothing of the
SDK is imported until `otlp_exporters` runs.
"""

from __future__ import annotations

import logging
import os
import threading
from typing import Any
from urllib.parse import urlsplit

# the telemetry's one logger (telemetry.py's): the name a logging config sets or silences it by
log = logging.getLogger("lazymem.agent.telemetry")

DEFAULT_ENDPOINT = "http://127.0.0.1:4318"
# OTLP/HTTP receives each signal at its path under the base URL (the OTLP specification's defaults)
_SIGNAL_PATHS = {"traces": "/v1/traces", "metrics": "/v1/metrics"}
# the loggers of the OTLP/HTTP exporters: each logs every failed batch, and every retry, while a collector is
# down (opentelemetry/exporter/otlp/common/http.py:212-233, with the logger the exporter passes in:
# opentelemetry/exporter/otlp/proto/http/trace_exporter/__init__.py:57,160); `_ExportHealth` says it once
_EXPORTER_LOGGERS = (
    "opentelemetry.exporter.otlp.proto.http.trace_exporter",
    "opentelemetry.exporter.otlp.proto.http.metric_exporter",
)


def otlp_base(endpoint: str | None) -> str:
    """The OTLP/HTTP base URL: `endpoint`, else $OTEL_EXPORTER_OTLP_ENDPOINT, else 127.0.0.1:4318."""
    return (endpoint or os.environ.get("OTEL_EXPORTER_OTLP_ENDPOINT") or DEFAULT_ENDPOINT).rstrip("/")


def shown_url(url: str) -> str:
    """`url` as a log line may show it: scheme, host and port, without credentials, path or query."""
    try:
        parts = urlsplit(url)
        host = parts.hostname or "?"
        return f"{parts.scheme}://{host}" + (f":{parts.port}" if parts.port else "")
    except ValueError:
        return "(an endpoint that does not parse)"


class _ExportHealth:
    """Whether exporting works, shared by the span and metric exporters of one Telemetry: the first failure
    is logged (a warning), and the first success after failures (info); nothing in between."""

    def __init__(self, endpoint: str):
        self.endpoint, self.failing, self._lock = endpoint, False, threading.Lock()

    def report(self, ok: bool, signal: str) -> None:
        with self._lock:
            if ok != self.failing:  # no change
                return
            self.failing = not ok
        if ok:
            log.info("telemetry: exporting to the collector at %s works again", self.endpoint)
        else:
            log.warning(
                "telemetry: could not export %s to the collector at %s (down, or refusing them); what cannot "
                "be sent is dropped, requests are not affected, and this is not logged again until an export "
                "succeeds",
                signal,
                self.endpoint,
            )


def otlp_exporters(endpoint: str | None, timeout_s: float) -> tuple[Any, Any]:
    """The OTLP/HTTP span and metric exporters of `Telemetry.from_settings`, to `endpoint` (`otlp_base`),
    reporting to one `_ExportHealth`, with the OTLP exporters' own log lines dropped."""
    base = otlp_base(endpoint)
    _quiet_exporter_logs()
    return _reported(base, timeout_s, _ExportHealth(shown_url(base)))


def _reported(base: str, timeout_s: float, health: _ExportHealth) -> tuple[Any, Any]:
    """The OTLP/HTTP span and metric exporters to `base`, each reporting to `health` whether its exports
    work. Built here, on first use, so that telemetry switched off never imports the SDK."""
    from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.metrics.export import MetricExporter, MetricExportResult
    from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult

    class ReportedSpans(SpanExporter):
        def __init__(self, exporter: OTLPSpanExporter):
            self.exporter = exporter

        def export(self, spans):
            try:
                result = self.exporter.export(spans)
            except Exception:  # noqa: BLE001 - never into the SDK's log with its text
                result = SpanExportResult.FAILURE
            health.report(result == SpanExportResult.SUCCESS, "traces")
            return result

        def shutdown(self) -> None:
            self.exporter.shutdown()

        def force_flush(self, timeout_millis: int = 30000) -> bool:
            return self.exporter.force_flush(timeout_millis)

    class ReportedMetrics(MetricExporter):
        # a MetricExporter itself: the periodic reader takes its preferred temporality and aggregation from
        # it (opentelemetry/sdk/metrics/_internal/export/__init__.py:492-496)
        def __init__(self, exporter: OTLPMetricExporter):
            super().__init__(exporter._preferred_temporality, exporter._preferred_aggregation)
            self.exporter = exporter

        def export(self, metrics_data, timeout_millis: float = 10_000, **kwargs):
            try:
                result = self.exporter.export(metrics_data, timeout_millis=timeout_millis, **kwargs)
            except Exception:  # noqa: BLE001
                result = MetricExportResult.FAILURE
            health.report(result == MetricExportResult.SUCCESS, "metrics")
            return result

        def force_flush(self, timeout_millis: float = 10_000) -> bool:
            return self.exporter.force_flush(timeout_millis=timeout_millis)

        def shutdown(self, timeout_millis: float = 30_000, **kwargs) -> None:
            # the periodic reader passes `timeout=`, not timeout_millis
            # (opentelemetry/sdk/metrics/_internal/export/__init__.py:602)
            self.exporter.shutdown(timeout_millis=timeout_millis, **kwargs)

    spans = OTLPSpanExporter(endpoint=base + _SIGNAL_PATHS["traces"], timeout=timeout_s)
    metrics = OTLPMetricExporter(endpoint=base + _SIGNAL_PATHS["metrics"], timeout=timeout_s)
    return ReportedSpans(spans), ReportedMetrics(metrics)


class _Dropped(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        return False


_QUIET = _Dropped()


def _quiet_exporter_logs() -> None:
    """Drop the OTLP exporters' own log lines (one per failed batch and retry): `_ExportHealth` says it
    once."""
    for name in _EXPORTER_LOGGERS:
        logger = logging.getLogger(name)
        if _QUIET not in logger.filters:
            logger.addFilter(_QUIET)
