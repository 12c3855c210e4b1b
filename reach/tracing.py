"""W3C trace context in Kafka headers (opentelemetry): injected on send, extracted by the agent runner."""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable
from typing import Any

from opentelemetry import propagate, trace
from opentelemetry.context import Context
from opentelemetry.trace import NonRecordingSpan, SpanContext, TraceFlags
from ulid import ULID

from reach.kafka import headers as h
from reach.records import Envelope, Usage

_HEX32 = re.compile(r"[0-9a-f]{32}")
# A ULID as Reach writes it (26 upper-case Crockford digits, at most 128 bits): its integer is the base-32 number
# these digits spell once mapped onto Python's own base-32 digits, ~15x cheaper than parsing it as a ULID object
_ULID = re.compile(r"[0-7][0-9A-HJKMNP-TV-Z]{25}")
_CROCKFORD = str.maketrans("0123456789ABCDEFGHJKMNPQRSTVWXYZ", "0123456789abcdefghijklmnopqrstuv")


_CROCKFORD_TO_DIGITS = str.maketrans("0123456789ABCDEFGHJKMNPQRSTVWXYZ", "0123456789abcdefghijklmnopqrstuv")


def _ulid_int(text: str) -> int | None:
    """A canonical (upper-case) ULID's 128-bit value by `int(_, 32)`, ~10x faster than ULID.from_str; None when
    `text` is not one (python-ulid then decides)."""
    if len(text) != 26 or text[0] > "7" or text != text.upper():
        return None
    digits = text.translate(_CROCKFORD_TO_DIGITS)
    if digits != digits.lower():  # a letter Crockford's alphabet lacks (I, L, O, U) was left as it was
        return None
    try:
        return int(digits, 32)
    except ValueError:
        return None


def trace_int(trace_id: str) -> int:
    """The 128-bit W3C trace id of an envelope's trace_id (a ULID, 32 hex digits, or anything else hashed)."""
    if _ULID.fullmatch(trace_id):
        return int(trace_id.translate(_CROCKFORD), 32) or 1
    text = trace_id.lower()
    fast = _ulid_int(trace_id)
    if fast is not None:
        value = fast
    elif _HEX32.fullmatch(text):
        value = int(text, 16)
    else:
        try:
            value = int(ULID.from_str(trace_id))
        except ValueError:
            value = int.from_bytes(hashlib.blake2b(trace_id.encode(), digest_size=16).digest(), "big")
    return value or 1


def _span_int(message_id: str) -> int:
    return int.from_bytes(hashlib.blake2b(message_id.encode(), digest_size=8).digest(), "big") or 1


def current_trace_id() -> str | None:
    """The active span's trace id as a ULID string (so envelope and W3C ids agree), or None."""
    ctx = trace.get_current_span().get_span_context()
    return str(ULID.from_int(ctx.trace_id)) if ctx.is_valid else None


def inject(envelope: Envelope) -> list[tuple[str, bytes]]:
    """Kafka headers carrying the caller's span, or one synthesized from the envelope's trace_id."""
    carrier: dict[str, str] = {}
    current = trace.get_current_span().get_span_context()
    if current.is_valid and current.trace_id == trace_int(envelope.trace_id):
        propagate.inject(carrier)
    else:
        carrier[h.TRACEPARENT] = (f"00-{trace_int(envelope.trace_id):032x}-"
                                  f"{_span_int(envelope.message_id):016x}-01")
    return [(k, v.encode()) for k, v in carrier.items()]


def extract(headers: Iterable[tuple[str, bytes]] | None, envelope: Envelope) -> Context:
    """The caller's trace context from Kafka headers, else the envelope's trace_id as a remote parent."""
    carrier = {k: v.decode(errors="replace") for k, v in (headers or [])}
    if h.TRACEPARENT in carrier:
        ctx = propagate.extract(carrier)
        if trace.get_current_span(ctx).get_span_context().is_valid:
            return ctx
    parent = SpanContext(trace_id=trace_int(envelope.trace_id), span_id=_span_int(envelope.message_id),
                         is_remote=True, trace_flags=TraceFlags(TraceFlags.SAMPLED))
    return trace.set_span_in_context(NonRecordingSpan(parent))


def tracer() -> trace.Tracer:
    """The tracer Reach's own spans use (a no-op until the application installs an SDK)."""
    return trace.get_tracer("reach")


def recording() -> bool:
    """True once the application installed an SDK (Reach's tracer is no longer the API's proxy or no-op one).

    Until then every span is a no-op whose context is its parent's: the agent then attaches the extracted context
    instead of opening its two spans per message, which cost a quarter of its in-process time per message
    (docs/decisions/0056-agent-batch-path.md)."""
    return not isinstance(tracer(), (trace.ProxyTracer, trace.NoOpTracer))


def invoke_agent_attributes(agent_id: str, capability: str) -> dict[str, Any]:
    """The OpenTelemetry GenAI attributes of the `invoke_agent` span a handler's run is (agent side)."""
    return {"gen_ai.operation.name": "invoke_agent", "gen_ai.agent.id": agent_id, "gen_ai.agent.name": agent_id,
            "reach.capability": capability}


def usage_attributes(usage: Usage) -> dict[str, Any]:
    """What a run reported (reach.core.usage), as GenAI semantic-convention attributes; the cost as reach.*."""
    found: dict[str, Any] = {"gen_ai.usage.input_tokens": usage.input_tokens,
                             "gen_ai.usage.output_tokens": usage.output_tokens}
    if usage.model is not None:
        found["gen_ai.request.model"] = usage.model
    if usage.cost_micros is not None:
        found["reach.usage.cost_micros"] = usage.cost_micros
        if usage.currency is not None:
            found["reach.usage.currency"] = usage.currency
    return found
