"""The agent memory's traces and metrics (OpenTelemetry), off unless `agent.telemetry.enabled`: the
`Telemetry` object, the spans and metrics of the memory operations, and the decorators memory.py puts on them.

One `Telemetry` per Memory (`memory.telemetry`, built by `Memory.from_cfg`, flushed by `Memory.close`) holds
its own TracerProvider and MeterProvider: nothing global is installed. Switched off, no provider, exporter or
thread exists, the OpenTelemetry SDK is not even imported, and a traced call costs a wrapper and an attribute
check (about 0.4 µs). The HTTP, MCP and model-call spans are in telemetry_http.py, telemetry_mcp.py and
telemetry_chat.py, the OTLP export in telemetry_export.py (docs/agent-telemetry.md).

No message text, question, API key, user id, URL path or query string reaches an attribute, event, span name
or metric label. Exceptions are not recorded as span events: their messages may quote a user id or a request.
"""

from __future__ import annotations

import functools
import inspect
import logging
import time
from collections.abc import AsyncIterator, Callable, Mapping
from contextlib import AbstractContextManager
from contextvars import ContextVar
from typing import Any

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.trace import SpanKind, StatusCode
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from lazymem.agent.errors import AgentError
from lazymem.agent.open_users import user_digest
from lazymem.agent.settings import TelemetrySettings
from lazymem.llm.client import CHAT_OBSERVER, ClientConfig
from lazymem.llm.completion import Completion

log = logging.getLogger(__name__)

# gen_ai.operation.name of each memory operation (semantic-conventions-genai docs/gen-ai/gen-ai-spans.md)
CREATE_MEMORY = "create_memory"  # an add
SEARCH_MEMORY = "search_memory"  # a query
DELETE_MEMORY = "delete_memory"  # a forget of some ids; forget_all (no record ids: every record)
UPSERT_MEMORY = "upsert_memory"  # an import: it stores or skips, the caller does not choose which
EXPORT_MEMORY = "export_memory"  # an export: not a value of the conventions (a custom one)

# attribute names
OPERATION = "gen_ai.operation.name"
STORE_ID = "gen_ai.memory.store.id"
RECORD_COUNT = "gen_ai.memory.record.count"
TENANT = "lazymem.tenant"
OUTCOME = "lazymem.outcome"  # of a counted record: stored, skipped, deleted, returned, exported
ERROR_TYPE = "error.type"

# histogram bucket boundaries, in seconds: the HTTP conventions' advice (http.server.request.duration), the
# MCP conventions' (mcp.server.operation.duration) and the gen_ai ones (gen_ai.client.*); a memory operation
# spans a millisecond (an add) to minutes (a query through a CPU model)
_HTTP_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.25, 0.5, 0.75, 1, 2.5, 5, 7.5, 10)
_MCP_BUCKETS = (0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1, 2, 5, 10, 30, 60, 120, 300)
_MEMORY_BUCKETS = (0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300)
_CHAT_BUCKETS = (0.01, 0.02, 0.04, 0.08, 0.16, 0.32, 0.64, 1.28, 2.56, 5.12, 10.24, 20.48, 40.96, 81.92)
_TOKEN_BUCKETS = tuple(4**k for k in range(14))  # 1 .. 67,108,864, as the gen_ai conventions advise
_W3C = TraceContextTextMapPropagator()  # W3C Trace Context only, whatever OTEL_PROPAGATORS says
# the operation being traced in this context: where `Telemetry.records` counts what it stored
_CURRENT: ContextVar[_Operation | None] = ContextVar("lazymem_operation", default=None)


def store_id(tenant: Any, user_id: Any) -> str | None:
    """`gen_ai.memory.store.id` of a user's memory: the name of the user's folder (OpenUsers.folder), a
    digest of tenant and user id. Pseudonymous, not anonymous: whoever knows a user id can compute it. None
    for ids that are not text (the call is refused anyway)."""
    if not isinstance(tenant, str) or not isinstance(user_id, str):
        return None
    try:
        return user_digest(tenant, user_id)
    except UnicodeEncodeError:  # a lone surrogate: refused as text that is not valid Unicode
        return None


def error_type(exc: BaseException) -> str:
    """`error.type` of a failure: an AgentError's code (lazymem/agent/errors.py), else the exception's
    class."""
    return exc.code if isinstance(exc, AgentError) else type(exc).__qualname__


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("lazymem")
    except PackageNotFoundError:
        return "0"


class Telemetry:
    """Traces and metrics of one Memory. `Telemetry()` is off; `Telemetry(span_exporter, metric_reader)`
    records to them (tests pass the SDK's InMemorySpanExporter and InMemoryMetricReader); `from_settings`
    builds the OTLP/HTTP ones of `agent.telemetry`. `batch`: spans go to the exporter from the SDK's batch
    thread (bounded queue; what does not fit is dropped) instead of as each span ends."""

    def __init__(
        self,
        span_exporter: Any = None,
        metric_reader: Any = None,
        *,
        service_name: str = "lazymem",
        batch: bool = False,
        timeout_s: float = 10.0,
    ):
        self.enabled = span_exporter is not None or metric_reader is not None
        self._tracer_provider = self._meter_provider = None
        if not self.enabled:
            return
        from opentelemetry.sdk.metrics import MeterProvider
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor, SimpleSpanProcessor

        version = _version()
        resource = Resource.create({"service.name": service_name, "service.version": version})
        self._tracer_provider = TracerProvider(resource=resource)
        if span_exporter is not None:
            processor = (
                BatchSpanProcessor(span_exporter, export_timeout_millis=timeout_s * 1000)
                if batch
                else SimpleSpanProcessor(span_exporter)
            )
            self._tracer_provider.add_span_processor(processor)
        readers = [] if metric_reader is None else [metric_reader]
        self._meter_provider = MeterProvider(resource=resource, metric_readers=readers)
        self.tracer = self._tracer_provider.get_tracer("lazymem.agent", version)
        meter = self._meter_provider.get_meter("lazymem.agent", version)
        self.operation_duration = meter.create_histogram(
            "lazymem.memory.operation.duration",
            unit="s",
            description="Duration of agent memory operations",
            explicit_bucket_boundaries_advisory=_MEMORY_BUCKETS,
        )
        self.records_counter = meter.create_counter(
            "lazymem.memory.records", unit="{record}", description="Memory records by operation and outcome"
        )
        self.http_duration = meter.create_histogram(
            "http.server.request.duration",
            unit="s",
            description="Duration of HTTP server requests.",
            explicit_bucket_boundaries_advisory=_HTTP_BUCKETS,
        )
        self.mcp_duration = meter.create_histogram(
            "mcp.server.operation.duration",
            unit="s",
            description="MCP request or notification duration as observed on the receiver",
            explicit_bucket_boundaries_advisory=_MCP_BUCKETS,
        )
        self.chat_duration = meter.create_histogram(
            "gen_ai.client.operation.duration",
            unit="s",
            description="GenAI operation duration.",
            explicit_bucket_boundaries_advisory=_CHAT_BUCKETS,
        )
        self.chat_tokens = meter.create_histogram(
            "gen_ai.client.token.usage",
            unit="{token}",
            description="Number of input and output tokens used.",
            explicit_bucket_boundaries_advisory=_TOKEN_BUCKETS,
        )

    @classmethod
    def from_settings(cls, settings: TelemetrySettings) -> Telemetry:
        """`agent.telemetry`: off, or OTLP/HTTP exporters to its endpoint, spans in batches and metrics
        every `metrics_every_s`."""
        if not settings.enabled:
            return cls()
        from opentelemetry.sdk.metrics.export import PeriodicExportingMetricReader

        # imported here, as the SDK: only switched on (and telemetry_export imports nothing of this module)
        from lazymem.agent.telemetry_export import otlp_exporters

        timeout = settings.timeout_s
        spans, metrics = otlp_exporters(settings.endpoint, timeout)
        reader = PeriodicExportingMetricReader(
            metrics,
            export_interval_millis=settings.metrics_every_s * 1000,
            export_timeout_millis=timeout * 1000,
        )
        return cls(
            spans,
            reader,
            service_name=settings.service_name,
            batch=True,
            timeout_s=timeout,
        )

    # ---- memory operations

    def operation(self, name: str, tenant: Any, user_id: Any, records: int | None = None) -> _Operation:
        """A span and the duration of one memory operation, current while it runs (the model calls it makes
        are its children); `records`: `gen_ai.memory.record.count` when known from the start."""
        return _Operation(self, name, tenant, user_id, records)

    def records(self, **outcomes: int) -> None:
        """Count records of the operation being traced by outcome (`stored=3, skipped=1`)."""
        op = _CURRENT.get()
        if op is not None and op.telemetry is self:
            op.count(**outcomes)

    async def pages(
        self, name: str, tenant: Any, user_id: Any, pages: AsyncIterator[list]
    ) -> AsyncIterator[list]:
        """`pages` (an export, page by page) under one span from the first page asked for to the last (or to
        the consumer's stop). The span is not made current: a page may be asked for in another task than the
        one before, and a context attached in one task cannot be detached in another."""
        op = _Operation(self, name, tenant, user_id, None, current=False)
        exported = 0
        with op:
            async for page in pages:
                exported += len(page)
                yield page
            op.done(exported, exported=exported)

    # ---- model calls (lazymem/llm/client.py: CHAT_OBSERVER)

    def chat(self, cfg: ClientConfig) -> AbstractContextManager[Callable[[Completion], None]]:
        # imported here, at a traced operation's model call: telemetry_chat imports nothing of this module,
        # which imports none of the telemetry's specific modules at load
        from lazymem.agent.telemetry_chat import Chat

        return Chat(self, cfg)

    # ---- the W3C trace context

    def extract(self, carrier: Mapping[str, Any] | None) -> otel_context.Context:
        """The remote parent that `carrier`'s `traceparent` and `tracestate` name (an empty context, so a
        new trace, when there is none or it does not parse). Values that are not text are ignored."""
        fields = {
            k: carrier[k] for k in ("traceparent", "tracestate") if isinstance((carrier or {}).get(k), str)
        }
        return _W3C.extract(fields)

    def close(self) -> None:
        """Export what is left (spans, then a last collection of the metrics) and stop the SDK's threads; at
        most about `timeout_s` a signal when the collector does not answer."""
        for provider in (self._tracer_provider, self._meter_provider):
            if provider is not None:
                try:
                    provider.shutdown()
                except Exception:  # noqa: BLE001 - telemetry never fails its owner's close
                    log.warning("telemetry shutdown failed", exc_info=True)
        self._tracer_provider = self._meter_provider = None
        self.enabled = False


class _Operation:
    """One memory operation: its span, made current (unless `current` is False), and its duration."""

    __slots__ = ("telemetry", "name", "attributes", "current", "span", "start", "_tokens")

    def __init__(self, telemetry: Telemetry, name: str, tenant: Any, user_id: Any, records, current=True):
        self.telemetry, self.name, self.current = telemetry, name, current
        self.attributes: dict[str, Any] = {OPERATION: name}
        if isinstance(tenant, str):
            self.attributes[TENANT] = tenant
        if (found := store_id(tenant, user_id)) is not None:
            self.attributes[STORE_ID] = found
        if records is not None:
            self.attributes[RECORD_COUNT] = records

    def __enter__(self) -> _Operation:
        # record_exception off: an exception's message may name the user (UnknownUser) or quote a request
        self.span = self.telemetry.tracer.start_span(
            self.name,
            kind=SpanKind.INTERNAL,
            attributes=self.attributes,
            record_exception=False,
            set_status_on_exception=False,
        )
        self._tokens = None
        if self.current:
            self._tokens = (
                otel_context.attach(trace.set_span_in_context(self.span)),
                _CURRENT.set(self),
                CHAT_OBSERVER.set(self.telemetry.chat),
            )
        self.start = time.perf_counter()
        return self

    def done(self, records: int | None, **outcomes: int) -> None:
        """The operation succeeded: its record count, and its records counted by outcome."""
        if records is not None:
            self.span.set_attribute(RECORD_COUNT, records)
        self.count(**outcomes)

    def count(self, **outcomes: int) -> None:
        for outcome, n in outcomes.items():
            if n:
                self.telemetry.records_counter.add(n, {OPERATION: self.name, OUTCOME: outcome})

    def __exit__(self, kind, exc, tb) -> None:
        labels = {OPERATION: self.name}
        if exc is not None and not isinstance(exc, GeneratorExit):  # GeneratorExit: an export left early
            labels[ERROR_TYPE] = error_type(exc)
            self.span.set_attribute(ERROR_TYPE, labels[ERROR_TYPE])
            self.span.set_status(StatusCode.ERROR)  # no description: it would be the exception's message
            partial = getattr(exc, "imported", None)  # ImportStopped: what the import stored before it
            if partial is not None:
                self.count(**_import_outcomes(partial))
        self.telemetry.operation_duration.record(time.perf_counter() - self.start, labels)
        self.span.end()
        if self._tokens is not None:
            span_token, op_token, chat_token = self._tokens
            CHAT_OBSERVER.reset(chat_token)
            _CURRENT.reset(op_token)
            otel_context.detach(span_token)


def _import_outcomes(imported: Any) -> dict[str, int]:
    skipped = imported.skipped + getattr(imported, "forgotten", 0)  # already stored, or forgotten since
    return {"stored": imported.stored, "skipped": skipped}


# ---- what each Memory method records (the decorators memory.py puts on them)

# operation -> (`gen_ai.memory.record.count` known from the call's arguments, else None; the record count and
# the records by outcome of its result)
_COUNTS: dict[str, tuple[Callable[[tuple, dict], int | None], Callable[[Any], tuple[int | None, dict]]]] = {
    # an add: the messages it brings (what it stored is counted where the store says: Telemetry.records)
    CREATE_MEMORY: (
        lambda args, kw: _length(args[0] if args else kw.get("messages")),
        lambda ids: (None, {}),
    ),
    # a query: the messages returned
    SEARCH_MEMORY: (
        lambda args, kw: None,
        lambda recall: (len(recall.messages), {"returned": len(recall.messages)}),
    ),
    # a forget: the ids it names; forget_all (no ids: every record of the user): the messages it deleted
    DELETE_MEMORY: (
        lambda args, kw: _length(args[0] if args else kw.get("message_ids")),
        lambda deleted: (deleted, {"deleted": deleted}),
    ),
    # an import: the messages it read, stored or skipped
    UPSERT_MEMORY: (lambda args, kw: None, lambda done: (_done_count(done), _import_outcomes(done))),
}


def _done_count(imported: Any) -> int:
    return sum(_import_outcomes(imported).values())


def _length(items: Any) -> int | None:
    """len() of a list or tuple of messages or ids (None for an iterator, which only the call may read)."""
    return len(items) if isinstance(items, (list, tuple)) else None


def traced(name: str) -> Callable:
    """Decorator of a Memory coroutine method `(self, user_id, ..., tenant=...)`: the call traced as the
    memory operation `name` when `self.telemetry` is on, run as it is otherwise."""
    attempted, finished = _COUNTS[name]

    def wrap(method: Callable) -> Callable:
        default_tenant = inspect.signature(method).parameters["tenant"].default

        @functools.wraps(method)
        async def traced_method(self, user_id, *args, **kwargs):
            telemetry = self.telemetry
            if not telemetry.enabled:
                return await method(self, user_id, *args, **kwargs)
            known = attempted(args, kwargs)
            with telemetry.operation(name, kwargs.get("tenant", default_tenant), user_id, known) as op:
                result = await method(self, user_id, *args, **kwargs)
                records, outcomes = finished(result)
                op.done(records if known is None else None, **outcomes)
            return result

        return traced_method

    return wrap


def traced_pages(name: str) -> Callable:
    """Decorator of a Memory method `(self, user_id, ..., tenant=...)` that returns an async iterator of
    pages: the pages under one span of the operation `name` when `self.telemetry` is on."""

    def wrap(method: Callable) -> Callable:
        default_tenant = inspect.signature(method).parameters["tenant"].default

        @functools.wraps(method)
        def traced_method(self, user_id, *args, **kwargs):
            pages = method(self, user_id, *args, **kwargs)
            telemetry = self.telemetry
            if not telemetry.enabled:
                return pages
            return telemetry.pages(name, kwargs.get("tenant", default_tenant), user_id, pages)

        return traced_method

    return wrap
