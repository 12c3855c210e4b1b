"""Kafka header names Agent-Reach reads and writes, in one place, and readers that never trust their values."""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from reach.errors import ReachError

TRACEPARENT = "traceparent"            # W3C trace context (opentelemetry propagator)
TRACESTATE = "tracestate"
CREATED_BY = "x-reach-created-by"      # the W3C traceparent of the span that produced an envelope, kept across a hop
ORIGIN_TOPIC = "x-reach-origin-topic"  # provenance of a dead letter
ORIGIN_PARTITION = "x-reach-origin-partition"
ORIGIN_OFFSET = "x-reach-origin-offset"
REASON = "x-reach-reason"              # why a record was dead-lettered
MESSAGE_ID = "x-reach-message-id"      # lets consumers skip decoding for bookkeeping
DUE_AT = "x-reach-due-at"              # epoch ms a record on a delay tier is due
TARGET = "x-reach-target"              # the capability topic a delay tier republishes to
BY = "x-reach-by"                      # who wrote a control tombstone (it has no updated_by; `reach audit`)
ROUTER = "x-reach-router"              # the routing worker that wrote a ROUTED receipt (its state loop skips it)
REPLY_TO = "x-reach-reply-to"          # the envelope's reply_to, on the router's receipts (the status fold replies)
FALLBACK = "x-reach-fallback"          # on a router's ending: `<capability> <child id>` it sent to the fallback
FANOUT_OF = "x-reach-fanout-of"        # on the router's receipts of a fan-out delivery: the parent's message id
FALLBACK_ASK = "x-reach-fallback-ask"  # on a timekeeper's or delay tier's ending: the status fold sends its fallback
STATUS = "x-reach-status"              # a receipt's status name: readers that want some statuses skip the rest

Headers = list[tuple[str, str | bytes | None]]
"""Kafka headers as confluent-kafka's producer takes them."""

Pairs = list[tuple[str, bytes]]
"""Headers as read: (name, value) with bytes values and no null ones."""

_INT_DIGITS = 20  # the longest int64 in decimal, sign included: longer values are not offsets or millis


class HeaderError(ReachError):
    """A header is present but its value is not what the header carries; `.raw` holds the value."""

    def __init__(self, message: str, *, name: str, raw: bytes) -> None:
        super().__init__(message)
        self.name = name
        self.raw = raw


def pairs(raw: Iterable[tuple[str, str | bytes | None]] | Mapping[str, str | bytes | None] | None) -> Pairs:
    """A record's headers as (name, bytes) pairs, whatever shape the client returned (list, dict, None)."""
    items = raw.items() if isinstance(raw, Mapping) else (raw or [])
    return [(str(k), v.encode(errors="replace") if isinstance(v, str) else bytes(v)) for k, v in items
            if v is not None]


def text(headers: Pairs, name: str) -> str | None:
    """The last value of header `name` as text (bad UTF-8 replaced, since it only labels), or None."""
    value = _last(headers, name)
    return None if value is None else value.decode(errors="replace")


def integer(headers: Pairs, name: str) -> int | None:
    """The last value of header `name` as a decimal integer, or None; HeaderError when it is not one."""
    value = _last(headers, name)
    if value is None:
        return None
    digits = value.strip()
    # int() also takes "1_000", Unicode digits and "+ 1"; a header written by Reach is plain ASCII.
    if not 0 < len(digits) <= _INT_DIGITS or not digits.lstrip(b"-").isdigit() or digits.count(b"-") > 1:
        raise HeaderError(f"header {name}: expected a decimal integer, got {value[:40]!r}", name=name, raw=value)
    return int(digits)


def receipt_status(headers: Pairs) -> str | None:
    """The status a receipt's producer said it carries (STATUS), or None when it did not say (decode to know).

    Only a filter: a reader skips a receipt whose status it does not want, and decodes one without the header."""
    value = _last(headers, STATUS)
    return None if value is None else value.decode("ascii", errors="replace")


def status_header(status: str) -> tuple[str, bytes]:
    """The STATUS header of a receipt with `status` (its Status name)."""
    return (STATUS, status.encode("ascii"))


def _last(headers: Pairs, name: str) -> bytes | None:
    for key, value in reversed(headers):
        if key == name:
            return value
    return None
