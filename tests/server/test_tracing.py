"""Traces: one trace from a client's traceparent through complete_task, the review (run later, on the review
worker's thread) and each critic in it; the HTTP traceparent header parents a request whose `_meta` has none;
off by default."""

from __future__ import annotations

import subprocess
import sys
from types import SimpleNamespace

import pytest
from conftest import call, clean_env, until

pytestmark = pytest.mark.anyio

TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"
CLIENT_SPAN = "00f067aa0ba902b7"
PARENT = f"00-{TRACE}-{CLIENT_SPAN}-01"
CLEAN = "def add(a, b):\n    return a + b\n"


_MADE: dict = {}  # OpenTelemetry's global provider can be set once per process: one for every test here


@pytest.fixture
def spans():
    """The spans this test's process finished, in memory (the SDK's in-memory exporter); tracing on meanwhile."""
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    from hiveboard.board import tracing

    class WhileOn(SimpleSpanProcessor):
        """Keeps only what ends while a test here traces: the global provider outlives these tests in this
        process, and the later tests' requests must not pile up in memory."""

        def on_end(self, span) -> None:
            if tracing.enabled():
                super().on_end(span)

    if not _MADE:
        _MADE["exporter"] = InMemorySpanExporter()
        _MADE["provider"] = TracerProvider()
        _MADE["provider"].add_span_processor(WhileOn(_MADE["exporter"]))
    _MADE["exporter"].clear()
    tracing.enable(_MADE["provider"])
    yield _MADE["exporter"]
    tracing.enable(None)
    _MADE["exporter"].clear()


def _hex(number: int, width: int) -> str:
    return format(number, f"0{width}x")


@pytest.mark.backends("sqlite", "postgresql")
async def test_one_trace_from_the_clients_traceparent_through_complete_task_the_review_and_each_critic(
    connect, reviewer, spans
):
    from opentelemetry import context
    from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

    engine = reviewer()
    async with connect("alice", review=engine) as c:
        card = await call(c, "create_task", title="add two numbers", task_type="code")
        claim = await call(c, "claim_task", task_id=card["id"])
        # the client's own trace, as Claude Code sends it: its traceparent goes out in the request's _meta
        token = context.attach(TraceContextTextMapPropagator().extract({"traceparent": PARENT}))
        try:
            await call(
                c,
                "complete_task",
                task_id=card["id"],
                token=claim["token"],
                output="add() in calc.py",
                artifacts=[{"name": "calc.py", "kind": "code", "content": CLEAN}],
            )
        finally:
            context.detach(token)
        trail = await call(c, "get_review", task_id=card["id"], wait_seconds=120)
    ran = [k["critic"] for k in trail["rounds"][0]["critiques"]]
    assert trail["rounds"][0]["verdict"] == "PASS" and len(ran) >= 3, trail

    # the verdict is stored inside the review's span, which ends just after: the answer can come first
    await until(lambda: any(s.name == "review" for s in spans.get_finished_spans()), 30, "the review's span to end")
    in_trace = [s for s in spans.get_finished_spans() if _hex(s.context.trace_id, 32) == TRACE]
    by_name = {s.name: s for s in in_trace}
    call_span = by_name["tools/call complete_task"]  # the server's span of the call, in the client's trace
    review = by_name["review"]
    assert review.parent is not None and review.parent.span_id == call_span.context.span_id
    assert review.attributes["hiveboard.task_id"] == card["id"] and review.attributes["hiveboard.round"] == 1
    for critic in ran:
        span = by_name[f"critic {critic}"]
        assert span.parent.span_id == review.context.span_id, critic
    assert review.end_time >= max(by_name[f"critic {c}"].end_time for c in ran)
    # the calls before it, made outside the client's trace, are not in it
    assert not any(s.name == "tools/call create_task" for s in in_trace)


async def test_the_http_traceparent_header_parents_a_request_without_one_in_meta(spans):
    from opentelemetry import trace

    from hiveboard.board import tracing
    from hiveboard.server.tracing import http_traceparent

    seen = {}

    async def call_next(ctx):
        seen["trace"] = _hex(trace.get_current_span().get_span_context().trace_id, 32)
        seen["keeps"] = tracing.traceparent()
        return "answer"

    request = SimpleNamespace(headers={"traceparent": PARENT})
    assert await http_traceparent(SimpleNamespace(request=request, meta=None), call_next) == "answer"
    assert seen["trace"] == TRACE and seen["keeps"] == PARENT
    own = f"00-{'a' * 32}-{'b' * 16}-01"  # _meta's traceparent wins: the SDK's span reads it
    await http_traceparent(SimpleNamespace(request=request, meta={"traceparent": own}), call_next)
    assert seen["trace"] != TRACE


def test_off_by_default_nothing_of_opentelemetry_is_loaded(tmp_path):
    """`serve` without otel_endpoint: the settings turn nothing on, a span is nothing, and no OpenTelemetry
    module is imported (a fresh interpreter: this module installed a provider in its own)."""
    script = (
        "import sys\n"
        "from hiveboard.board import tracing\n"
        "from hiveboard.server.config import load_settings\n"
        "from hiveboard.server.tracing import configure\n"
        "configure(load_settings())\n"
        f"with tracing.span('review', parent={PARENT!r}):\n"
        "    assert tracing.traceparent() is None\n"
        "assert not tracing.enabled()\n"
        "print(sorted(m for m in sys.modules if m.startswith('opentelemetry')))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script],
        capture_output=True,
        text=True,
        env=clean_env(HIVEBOARD_HOME=str(tmp_path)),
        timeout=120,
    )
    assert done.returncode == 0 and done.stdout.strip() == "[]", done.stdout + done.stderr


def test_an_otel_endpoint_without_the_exporter_is_one_sentence(monkeypatch, tmp_path):
    import builtins

    from hiveboard.server.config import SetupError, load_settings
    from hiveboard.server.tracing import configure

    real = builtins.__import__

    def without_otlp(name, *args, **kwargs):
        if name.startswith("opentelemetry.exporter"):
            raise ImportError(name)
        return real(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", without_otlp)
    settings = load_settings(home=tmp_path, otel_endpoint="http://127.0.0.1:4318/v1/traces")
    with pytest.raises(SetupError, match=r"pip install 'hiveboard\[otel\]'"):
        configure(settings)


class _Collector:
    """An OTLP/HTTP traces receiver on loopback: what `serve` exports, decoded with OpenTelemetry's protobufs."""

    def __init__(self):
        import http.server
        import threading

        from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

        spans = self.spans = []

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self):
                body = self.rfile.read(int(self.headers["content-length"]))
                request = ExportTraceServiceRequest.FromString(body)
                for resource in request.resource_spans:
                    for scope in resource.scope_spans:
                        spans.extend(scope.spans)
                self.send_response(200)
                self.send_header("content-type", "application/x-protobuf")
                self.end_headers()

            def log_message(self, *args):
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/v1/traces"
        threading.Thread(target=self.server.serve_forever, args=(0.02,), daemon=True).start()  # a prompt shutdown()

    def close(self):
        self.server.shutdown()


async def test_serve_exports_the_trace_of_an_http_call_and_its_review_over_otlp(tmp_path):
    """`hiveboard serve --http` with HIVEBOARD_OTEL_ENDPOINT: the call made with an HTTP traceparent header, the
    review and its critics reach the collector in the client's trace."""
    import time

    import httpx2
    from conftest import self_registered_token, serve_http, stop_process
    from mcp.client import Client
    from mcp.client.streamable_http import streamable_http_client
    from opentelemetry import context
    from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

    collector = _Collector()
    env = clean_env(HIVEBOARD_OTEL_ENDPOINT=collector.url, OTEL_BSP_SCHEDULE_DELAY="100")
    proc, url = serve_http(tmp_path / "home", env=env)
    try:
        token = await self_registered_token(url, "alice")
        headers = {"Authorization": f"Bearer {token}", "traceparent": PARENT}
        # the client's current context is the same trace, so a traceparent it puts in _meta agrees with the header
        attached = context.attach(TraceContextTextMapPropagator().extract({"traceparent": PARENT}))
        try:
            async with Client(streamable_http_client(url, http_client=httpx2.AsyncClient(headers=headers))) as c:
                card = await call(c, "create_task", title="add two numbers", task_type="code")
                claim = await call(c, "claim_task", task_id=card["id"])
                await call(
                    c,
                    "complete_task",
                    task_id=card["id"],
                    token=claim["token"],
                    output="add() in calc.py",
                    artifacts=[{"name": "calc.py", "kind": "code", "content": CLEAN}],
                )
                trail = await call(c, "get_review", task_id=card["id"], wait_seconds=120)
        finally:
            context.detach(attached)
        critics = [k["critic"] for k in trail["rounds"][0]["critiques"]]
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            names = {s.name for s in collector.spans if s.trace_id.hex() == TRACE}
            if {"review", *(f"critic {c}" for c in critics)} <= names:
                break
            time.sleep(0.2)
        in_trace = {s.name: s for s in collector.spans if s.trace_id.hex() == TRACE}
        assert "tools/call complete_task" in in_trace, sorted(in_trace)
        review = in_trace["review"]
        assert review.parent_span_id == in_trace["tools/call complete_task"].span_id
        for critic in critics:
            assert in_trace[f"critic {critic}"].parent_span_id == review.span_id
    finally:
        stop_process(proc)
        collector.close()
