"""Reach's spans (reach.tracing) and their export set-up (reach.traceexport), on opentelemetry-sdk's in-memory
exporter: with spans off every helper hands back what it was given; with them on, a root span takes the
envelope's trace id, the routing decision names itself on the forward and keeps the producer's span for the
delivery's link, and OTEL_* decides whether anything is installed."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind

from reach import traceexport, tracing
from reach.envelopes import new_envelope


class Forward:
    """The decision's shape the span reads (reach.core.routing.Forward names its instance)."""

    def __init__(self, instance_id: str, agent_id: str) -> None:
        self.instance = type("Instance", (), {"instance_id": instance_id, "agent_id": agent_id})()


class Record:
    """A consumed record as the router holds it."""

    def __init__(self, headers: list[tuple[str, bytes]] | None) -> None:
        self.raw_headers = headers
        self.topic, self.partition, self.offset = "ns.cap.a.b", 3, 42


@pytest.fixture
def spans(monkeypatch: pytest.MonkeyPatch) -> Iterator[InMemorySpanExporter]:
    """Spans on, recorded in memory by a provider `configure` would make (this process's global stays a no-op)."""
    exporter = InMemorySpanExporter()
    provider = TracerProvider(id_generator=traceexport.EnvelopeTraceIds())
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    monkeypatch.setattr(tracing, "tracer", lambda: provider.get_tracer("reach"))
    monkeypatch.setattr(tracing, "on", lambda: True)
    monkeypatch.setattr(traceexport, "ours", lambda: True)
    yield exporter


def test_with_spans_off_nothing_changes(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(tracing, "on", lambda: False)
    env = new_envelope("a.b", {"x": 1})
    assert tracing.inject(env, topic="ns.cap.a.b") == tracing.inject(env)
    headers = [("traceparent", b"00-" + b"1" * 32 + b"-" + b"2" * 16 + b"-01")]
    assert tracing.routed(Record(headers), env.model_dump(), object(), since=0.0) is headers
    assert tracing.intake(env, "t").__enter__() is None


def test_send_route_and_delivery_hang_together(spans: InMemorySpanExporter) -> None:
    env = new_envelope("a.b", {"x": 1})
    trace_id = tracing.trace_int(env.trace_id)
    with tracing.intake(env, "ns.cap.a.b"):
        sent = dict(tracing.inject(env, topic="ns.cap.a.b"))
    forwarded = dict(tracing.routed(Record(list(sent.items())), env.model_dump(), Forward("i-1", "agent://x"),
                                    since=0.0))
    by_name = {s.name: s for s in spans.get_finished_spans()}
    intake, send, route = by_name["reach.intake a.b"], by_name["send ns.cap.a.b"], by_name["reach.route a.b"]
    assert intake.parent is None and intake.context.trace_id == trace_id and intake.kind is SpanKind.SERVER
    assert send.parent.span_id == intake.context.span_id and send.kind is SpanKind.PRODUCER
    assert route.parent.span_id == send.context.span_id and route.kind is SpanKind.CONSUMER
    attributes: dict[str, Any] = dict(route.attributes or {})
    assert attributes["messaging.destination.partition.id"] == "3" and attributes["messaging.kafka.offset"] == 42
    assert attributes["reach.route.outcome"] == "Forward" and attributes["reach.instance_id"] == "i-1"
    assert attributes["gen_ai.conversation.id"] == env.trace_id
    assert forwarded["traceparent"].decode().split("-")[2] == f"{route.context.span_id:016x}"
    assert forwarded["x-reach-created-by"] == sent["traceparent"]
    [link] = tracing.created_by(list(forwarded.items()))
    assert link.context.span_id == send.context.span_id


def test_otel_variables_decide_what_is_exported() -> None:
    assert traceexport.exporters_asked({}) == []
    assert traceexport.exporters_asked({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318"}) == ["otlp"]
    assert traceexport.exporters_asked({"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://c/v1/traces"}) == ["otlp"]
    assert traceexport.exporters_asked({"OTEL_TRACES_EXPORTER": "otlp,console"}) == ["otlp", "console"]
    assert traceexport.exporters_asked({"OTEL_TRACES_EXPORTER": "none", "OTEL_EXPORTER_OTLP_ENDPOINT": "x"}) == []
    assert traceexport.exporters_asked({"OTEL_SDK_DISABLED": "true", "OTEL_EXPORTER_OTLP_ENDPOINT": "x"}) == []
    assert traceexport.configure("reach-test", {}) is False


def test_an_exporter_reach_cannot_use_is_a_clear_error() -> None:
    with pytest.raises(traceexport.TracingConfigError, match="http/protobuf"):
        traceexport.configure("reach-test", {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4317",
                                             "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"})
    with pytest.raises(traceexport.TracingConfigError, match="zipkin"):
        traceexport.configure("reach-test", {"OTEL_TRACES_EXPORTER": "zipkin"})
