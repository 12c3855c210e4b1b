"""W3C trace context in Kafka headers (opentelemetry), and Reach's spans: intake, send, routing decision, delivery,
handler run, channel send (docs/operations.md "Tracing", decision 0066).

Spans are made only once an SDK is installed (reach.traceexport.configure, or the application's own): until then
every helper here checks one cached flag (`on`, asked at most once a second) and returns what it was given, so
tracing off costs a request nothing measurable (docs/performance.md "Tracing off"). Across a Kafka hop the
`traceparent` header names the span that last handled the record (the router's routing decision names itself
on the forward), and `x-reach-created-by` keeps the producer's span: the agent's delivery span is a child of
the routing decision and links to the span that created the envelope (messaging semantic conventions)."""

from __future__ import annotations

import contextlib
import hashlib
import re
import time
from collections.abc import Awaitable, Iterable, Iterator, Sequence
from typing import Any, Protocol, TypeVar

from opentelemetry import propagate, trace
from opentelemetry.context import Context
from opentelemetry.trace import Link, NonRecordingSpan, Span, SpanContext, SpanKind, TraceFlags
from ulid import ULID

from reach import traceexport
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


def inject(envelope: Envelope, *, topic: str | None = None) -> list[tuple[str, bytes]]:
    """Kafka headers carrying the caller's span, or one synthesized from the envelope's trace_id. With spans on
    and a `topic`, a PRODUCER span `send <topic>` (a child of the caller's span of the same trace, else the
    trace's root) is what they carry, also as `x-reach-created-by`."""
    carrier: dict[str, str] = {}
    current = trace.get_current_span().get_span_context()
    same = current.is_valid and current.trace_id == trace_int(envelope.trace_id)
    if topic is not None and on():
        span = _start(f"send {topic}", SpanKind.PRODUCER, parent=trace.get_current_span() if same else None,
                      trace_id=envelope.trace_id, message_id=envelope.message_id,
                      attributes={**messaging("send", topic, envelope.message_id), **envelope_attributes(envelope)})
        span.end()
        propagate.inject(carrier, context=trace.set_span_in_context(span))
        if h.TRACEPARENT in carrier:
            carrier[h.CREATED_BY] = carrier[h.TRACEPARENT]
    elif same:
        propagate.inject(carrier)
    else:
        carrier[h.TRACEPARENT] = (f"00-{trace_int(envelope.trace_id):032x}-"
                                  f"{_span_int(envelope.message_id):016x}-01")
    return [(k, v.encode()) for k, v in carrier.items()]


def extract(headers: Iterable[tuple[str, bytes]] | None, envelope: Envelope) -> Context:
    """The caller's trace context from Kafka headers, else the envelope's trace_id as a remote parent."""
    return context_of(headers, envelope.trace_id, envelope.message_id)


def context_of(headers: Iterable[tuple[str, str | bytes | None]] | None, trace_id: str, message_id: str) -> Context:
    """`extract` for a record known by its ids (the router reads the envelope as a dict)."""
    raw = _header(headers, h.TRACEPARENT)
    if raw is not None:
        ctx = propagate.extract({h.TRACEPARENT: raw})
        if trace.get_current_span(ctx).get_span_context().is_valid:
            return ctx
    return trace.set_span_in_context(NonRecordingSpan(_synthesized(trace_id, message_id)))


def _synthesized(trace_id: str, message_id: str) -> SpanContext:
    return SpanContext(trace_id=trace_int(trace_id), span_id=_span_int(message_id), is_remote=True,
                       trace_flags=TraceFlags(TraceFlags.SAMPLED))


def _header(headers: Iterable[tuple[str, str | bytes | None]] | None, name: str) -> str | None:
    found = None
    for key, value in headers or ():
        if key == name and value is not None:
            found = value.decode(errors="replace") if isinstance(value, bytes) else value
    return found


def tracer() -> trace.Tracer:
    """The tracer Reach's own spans use (a no-op until the application installs an SDK)."""
    return trace.get_tracer("reach")


def recording() -> bool:
    """True once the application installed an SDK (Reach's tracer is no longer the API's proxy or no-op one).

    Until then every span is a no-op whose context is its parent's: the agent then attaches the extracted context
    instead of opening its two spans per message, which cost a quarter of its in-process time per message
    (docs/decisions/0056-agent-batch-path.md)."""
    return not isinstance(tracer(), (trace.ProxyTracer, trace.NoOpTracer))


_RECHECK_S = 1.0
_state = {"on": False, "at": -_RECHECK_S}


def on() -> bool:
    """`recording()`, asked at most once a second: the flag every span helper checks first (tracing off costs
    a request this check)."""
    now = time.monotonic()
    if now - _state["at"] >= _RECHECK_S:
        _state["on"], _state["at"] = recording(), now
    return bool(_state["on"])


def _start(name: str, kind: SpanKind, *, parent: Span | None, trace_id: str, message_id: str,
           attributes: dict[str, Any], links: Sequence[Link] = (), start_time: int | None = None) -> Span:
    """A span under `parent`, else the root of the envelope's trace (its W3C id is the envelope's trace_id; with
    a provider `configure` did not make, a child of the trace's synthesized parent)."""
    if parent is not None:
        return tracer().start_span(name, context=trace.set_span_in_context(parent), kind=kind,
                                   attributes=attributes, links=links, start_time=start_time)
    if not traceexport.ours():
        context = trace.set_span_in_context(NonRecordingSpan(_synthesized(trace_id, message_id)))
        return tracer().start_span(name, context=context, kind=kind, attributes=attributes, links=links,
                                   start_time=start_time)
    token = traceexport.WANTED_TRACE.set(trace_int(trace_id))
    try:
        return tracer().start_span(name, context=Context(), kind=kind, attributes=attributes, links=links,
                                   start_time=start_time)
    finally:
        traceexport.WANTED_TRACE.reset(token)


def messaging(operation: str, topic: str, message_id: str, *, partition: int | None = None,
              offset: int | None = None) -> dict[str, Any]:
    """The messaging semantic-convention attributes of a Kafka span."""
    found: dict[str, Any] = {"messaging.system": "kafka", "messaging.operation.type": operation,
                             "messaging.operation.name": operation, "messaging.destination.name": topic,
                             "messaging.message.id": message_id}
    if partition is not None:
        found["messaging.destination.partition.id"] = str(partition)
    if offset is not None:
        found["messaging.kafka.offset"] = offset
    return found


def envelope_attributes(envelope: Envelope | dict[str, Any]) -> dict[str, Any]:
    """What every Reach span of an envelope says: its capability and tenant, the A2A task it is (its message id)
    and the GenAI conversation (the A2A context: its session key, else its trace)."""
    get = envelope.get if isinstance(envelope, dict) else lambda name: getattr(envelope, name)
    routing = get("routing")
    session = (routing.get("session_key") if isinstance(routing, dict) else getattr(routing, "session_key", None))
    return {"reach.capability": get("capability"), "reach.tenant": get("tenant"), "reach.trace_id": get("trace_id"),
            "a2a.task.id": get("message_id"), "gen_ai.conversation.id": session or get("trace_id")}


@contextlib.contextmanager
def _span_of(span: Span) -> Iterator[Span]:
    with trace.use_span(span, end_on_exit=True):
        yield span


def intake(envelope: Envelope, topic: str) -> contextlib.AbstractContextManager[Span | None]:
    """The gateway's intake of one envelope (a SERVER span, the trace's root) around its publish, or nothing."""
    if not on():
        return contextlib.nullcontext()
    return _span_of(_start(f"reach.intake {envelope.capability}", SpanKind.SERVER, parent=None,
                           trace_id=envelope.trace_id, message_id=envelope.message_id,
                           attributes={**envelope_attributes(envelope), "reach.source": envelope.source,
                                       "messaging.destination.name": topic}))


class Record(Protocol):
    """A consumed Kafka record, as the router holds it (reach.kafka.worker.Record)."""

    topic: str
    partition: int
    offset: int

    @property
    def raw_headers(self) -> Any: ...


def routed(record: Record, envelope: dict[str, Any], outcome: object, *, since: float) -> Any:
    """The headers a forward carries. With spans on, the routing decision of the record (a CONSUMER span from
    `since`, a time.monotonic() reading, to now, a child of the span that produced it, ended at once) is what
    their `traceparent` names, and `x-reach-created-by` keeps the producer's span (the creation context). With
    spans off: the record's own headers, untouched."""
    headers = record.raw_headers
    if not on():
        return headers
    parent = trace.get_current_span(context_of(headers, envelope["trace_id"], envelope["message_id"]))
    attributes = {**messaging("process", record.topic, envelope["message_id"], partition=record.partition,
                              offset=record.offset),
                  **envelope_attributes(envelope), "reach.route.outcome": type(outcome).__name__}
    instance = getattr(outcome, "instance", None)
    if instance is not None:
        attributes["reach.instance_id"] = instance.instance_id
        attributes["gen_ai.agent.id"] = instance.agent_id
    start = time.time_ns() - int((time.monotonic() - since) * 1e9)
    span = _start(f"reach.route {envelope['capability']}", SpanKind.CONSUMER, parent=parent,
                  trace_id=envelope["trace_id"], message_id=envelope["message_id"], attributes=attributes,
                  start_time=start)
    span.end()
    return forward(headers, span.get_span_context())


def forward(headers: list[tuple[str, bytes]] | None, routed_by: SpanContext) -> list[tuple[str, bytes]]:
    """`headers` with `traceparent` naming `routed_by` and `x-reach-created-by` the producer's span."""
    kept = [(k, v) for k, v in headers or () if k not in (h.TRACEPARENT, h.TRACESTATE)]
    created = _header(headers, h.CREATED_BY) or _header(headers, h.TRACEPARENT)
    if created is not None and _header(headers, h.CREATED_BY) is None:
        kept.append((h.CREATED_BY, created.encode()))
    carrier: dict[str, str] = {}
    propagate.inject(carrier, context=trace.set_span_in_context(NonRecordingSpan(routed_by)))
    return kept + [(k, v.encode()) for k, v in carrier.items()]


def created_by(headers: Iterable[tuple[str, bytes]] | None) -> list[Link]:
    """A link to the span that produced the record (`x-reach-created-by`), for its delivery span."""
    raw = _header(headers, h.CREATED_BY)
    if raw is None:
        return []
    context = trace.get_current_span(propagate.extract({h.TRACEPARENT: raw})).get_span_context()
    return [Link(context, {"reach.link": "created_by"})] if context.is_valid else []


def delivery_attributes(envelope: Envelope, origin: tuple[str, int, int] | None) -> dict[str, Any]:
    """The agent's delivery span (`reach.handle`): messaging `process` of the inbox record at `origin` (topic,
    partition, offset), the envelope's ids."""
    topic, partition, offset = origin or ("", None, None)
    return {**messaging("process", topic, envelope.message_id, partition=partition, offset=offset),
            **envelope_attributes(envelope), "reach.message_id": envelope.message_id, "reach.attempt": envelope.attempt}


T = TypeVar("T")


async def client_call(call: Awaitable[T], name: str, attributes: dict[str, Any]) -> T:
    """A call to the outside world (a channel's provider send) as a CLIENT span of the current run, or just it."""
    if not on():
        return await call
    with tracer().start_as_current_span(name, kind=SpanKind.CLIENT, attributes=attributes):
        return await call


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
