"""OpenTelemetry spans for reviews and critics, joined to the client's trace; off by default. (The MCP SDK
spans each request itself, a child of the traceparent in the request's `_meta`; server/tracing.py adds the
HTTP `traceparent` header as the parent of a request that has none there.)

Off (no provider installed), `span` is a context manager that does nothing and imports nothing: a server
without tracing pays a branch per call. `enable(provider)` turns it on for this process; server/tracing.py
builds the provider from the settings (an OTLP exporter) and tests install one with an in-memory exporter.

A review runs later, on a worker thread, maybe in another process: the W3C `traceparent` of the call that
queued it is kept with the job (`traceparent()`, read when the review row is written into the reviews
table's `traceparent` column), and the review's span is started as its child, so the client's trace holds
the call, the review and each critic. The board sits below every layer that traces, so this lives here.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

NAME = "hiveboard"
_on = False


def enable(provider) -> None:
    """Trace this process with `provider` (an opentelemetry-sdk TracerProvider), made the global one so that the
    MCP SDK's span of each request (with the `_meta` traceparent as its parent) uses it too; None turns this
    module's spans off. OpenTelemetry takes a global provider once per process."""
    global _on
    if provider is None:
        _on = False
        return
    from opentelemetry import trace

    if trace.get_tracer_provider() is not provider:  # turned back on with the same provider: nothing to set
        trace.set_tracer_provider(provider)
    _on = True


def enabled() -> bool:
    return _on


@contextmanager
def span(name: str, parent: str | None = None, attributes: dict | None = None) -> Iterator[None]:
    """A span named `name`, child of the W3C `parent` traceparent when given (else of the current span);
    nothing when tracing is off. An exception inside is recorded on the span and raised on."""
    if not _on:
        yield
        return
    from opentelemetry import trace
    from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

    ctx = TraceContextTextMapPropagator().extract({"traceparent": parent}) if parent else None
    with trace.get_tracer(NAME).start_as_current_span(name, context=ctx, attributes=attributes or {}):
        yield


def traceparent() -> str | None:
    """The W3C traceparent of the current span (the tool call being served), for a job to keep; None when
    tracing is off or no span is current."""
    if not _on:
        return None
    from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

    carrier: dict[str, str] = {}
    TraceContextTextMapPropagator().inject(carrier)
    return carrier.get("traceparent")
