"""Trace ids: envelope trace_id and W3C trace id agree, on send and on extract."""

from __future__ import annotations

from opentelemetry import trace
from ulid import ULID

from reach import tracing
from reach.envelopes import new_envelope


def test_inject_then_extract_round_trips_the_envelope_trace() -> None:
    env = new_envelope("a.b", {"x": 1})
    headers = tracing.inject(env)
    [(name, value)] = headers
    assert name == "traceparent" and value.decode().split("-")[1] == f"{int(ULID.from_str(env.trace_id)):032x}"
    ctx = tracing.extract(headers, env)
    assert trace.get_current_span(ctx).get_span_context().trace_id == int(ULID.from_str(env.trace_id))


def test_extract_without_headers_uses_the_envelope_trace_id() -> None:
    env = new_envelope("a.b", {}, trace_id="0af7651916cd43dd8448eb211c80319c")
    span = trace.get_current_span(tracing.extract([], env)).get_span_context()
    assert span.trace_id == 0x0AF7651916CD43DD8448EB211C80319C and span.is_remote


def test_foreign_trace_ids_still_map_to_128_bits() -> None:
    assert 0 < tracing.trace_int("order-42") < 2**128


def test_a_ulid_maps_to_the_same_trace_id_as_the_ulid_library_reads_it() -> None:
    for text in [str(ULID()) for _ in range(500)] + ["00000000000000000000000000", "7ZZZZZZZZZZZZZZZZZZZZZZZZZ"]:
        assert tracing.trace_int(text) == (int(ULID.from_str(text)) or 1)
        assert tracing.trace_int(text.lower()) == (int(ULID.from_str(text)) or 1)  # the library's path
