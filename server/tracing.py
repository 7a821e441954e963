"""Tracing for `hiveboard serve`: the OTLP exporter from the settings, and the HTTP `traceparent` header.

Off unless `otel_endpoint` is set (HIVEBOARD_OTEL_ENDPOINT, an OTLP/HTTP collector such as
`http://127.0.0.1:4318/v1/traces`): then the `hiveboard[otel]` extra must be installed, and spans leave in
batches from a thread of their own. board/tracing.py holds the spans themselves.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from hiveboard.board import tracing

from .config import SetupError

if TYPE_CHECKING:
    from .config import Settings


def configure(settings: Settings) -> None:
    """Turn tracing on for this process when the settings name a collector; SetupError if it cannot be."""
    if not settings.otel_endpoint:
        return
    try:
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor
    except ImportError:
        raise SetupError(
            "otel_endpoint is set but OpenTelemetry's exporter is not installed; pip install 'hiveboard[otel]', "
            "or unset HIVEBOARD_OTEL_ENDPOINT"
        ) from None
    provider = TracerProvider(resource=Resource.create({"service.name": settings.otel_service_name}))
    provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter(endpoint=settings.otel_endpoint)))
    tracing.enable(provider)


async def http_traceparent(ctx, call_next):
    """Server middleware, outside the SDK's own span: a request over HTTP whose `_meta` carries no traceparent
    gets its HTTP `traceparent` header's as the parent (the SDK reads only `_meta`)."""
    if not tracing.enabled():
        return await call_next(ctx)
    header = None
    request = getattr(ctx, "request", None)
    if request is not None and not (ctx.meta and "traceparent" in ctx.meta):
        header = getattr(request, "headers", {}).get("traceparent")
    if header is None:
        return await call_next(ctx)
    from opentelemetry import context
    from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

    token = context.attach(TraceContextTextMapPropagator().extract({"traceparent": header}))
    try:
        return await call_next(ctx)
    finally:
        context.detach(token)
