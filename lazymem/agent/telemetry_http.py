"""The agent service's HTTP server spans (OpenTelemetry): `HttpTelemetry`, the ASGI middleware service.py
adds when telemetry is on, a SERVER span per request, child of the request's W3C `traceparent`, whose reply
carries a `traceresponse` header, and `http.server.request.duration`; and `FASTAPI_TELEMETRY_OFF`, the
settings that keep FastAPI's own instrumentation off.
"""

from __future__ import annotations

import time
from typing import Any

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.trace import SpanKind, StatusCode

from lazymem.agent.telemetry import ERROR_TYPE, Telemetry

_HTTP_METHODS = frozenset(
    {"CONNECT", "DELETE", "GET", "HEAD", "OPTIONS", "PATCH", "POST", "PUT", "QUERY", "TRACE"}
)
# FastAPI's own OpenTelemetry instrumentation (fastapi/telemetry/, on as soon as a global provider exists or
# FASTAPI_OTEL_AUTO_CONFIGURE=true: fastapi/applications.py:1040-1053, fastapi/telemetry/_asgi.py:174-198)
# records url.path, which holds the user id (fastapi/telemetry/_asgi.py:304), and exception messages: the
# service turns it off, and HttpTelemetry traces its requests instead
FASTAPI_TELEMETRY_OFF = {"tracing": False, "metrics": False, "logs": False, "auto_configure": False}


class HttpTelemetry:
    """ASGI middleware: a SERVER span per HTTP request, named `{method} {route template}` (`POST
    /v1/users/{user_id}/query`: never the path, which holds the user id), child of the request's W3C
    `traceparent`/`tracestate` headers (a new trace without them), current while the app answers (so the
    memory operations are its children); the reply's `traceresponse` header (W3C Trace Context Level 2) gives
    the trace id and the span id back. Attributes and the `http.server.request.duration` labels follow the
    HTTP conventions, without url.path, url.query, client.address or any header but those two."""

    def __init__(self, app, telemetry: Telemetry):
        self.app, self.telemetry = app, telemetry

    async def __call__(self, scope, receive, send):
        telemetry = self.telemetry
        if scope["type"] != "http" or not telemetry.enabled:
            return await self.app(scope, receive, send)
        carrier: dict[str, str] = {}
        for name, value in scope["headers"]:
            if name in (b"traceparent", b"tracestate") and name.decode() not in carrier:
                carrier[name.decode()] = value.decode("latin-1")
        method = scope["method"] if scope["method"] in _HTTP_METHODS else "_OTHER"
        labels: dict[str, Any] = {"http.request.method": method, "url.scheme": scope.get("scheme", "http")}
        if scope.get("http_version"):
            labels["network.protocol.version"] = scope["http_version"]
        name = "HTTP" if method == "_OTHER" else method
        span = telemetry.tracer.start_span(
            name,
            context=telemetry.extract(carrier),
            kind=SpanKind.SERVER,
            attributes=labels,
            record_exception=False,
            set_status_on_exception=False,
        )
        ids = span.get_span_context()
        traceresponse = f"00-{ids.trace_id:032x}-{ids.span_id:016x}-{ids.trace_flags:02x}".encode()
        status: int | None = None

        async def send_traced(message):
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
                headers = [*message.get("headers", []), (b"traceresponse", traceresponse)]
                message = {**message, "headers": headers}
            await send(message)

        start = time.perf_counter()
        token = otel_context.attach(trace.set_span_in_context(span))
        failure: BaseException | None = None
        try:
            await self.app(scope, receive, send_traced)
        except BaseException as e:
            failure = e
            raise
        finally:
            otel_context.detach(token)
            matched = scope.get("route")  # the route the router chose (starlette/routing.py:700-703)
            route = getattr(matched, "path_format", None) or getattr(matched, "path", None)
            if isinstance(route, str):
                labels["http.route"] = route
                span.update_name(f"{name} {route}")
            if status is not None:
                labels["http.response.status_code"] = status
            if failure is not None:
                labels[ERROR_TYPE] = type(failure).__qualname__
            elif status is None or status >= 500:  # a 4xx is the client's error, not the server span's
                labels[ERROR_TYPE] = str(status or 500)
            span.set_attributes(labels)
            if ERROR_TYPE in labels:
                span.set_status(StatusCode.ERROR)
            telemetry.http_duration.record(time.perf_counter() - start, labels)
            span.end()
