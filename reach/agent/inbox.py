"""Reading one inbox record: an Envelope, or a dead letter (raw bytes kept) when it cannot be read."""

from __future__ import annotations

from dataclasses import dataclass, replace

from reach import dlq
from reach.envelopes import now_ms
from reach.kafka import avrogen, codec
from reach.kafka import headers as h
from reach.kafka.types import Message
from reach.records import Envelope, ErrorInfo, Receipt, Status, StepStatus

UNDECODABLE = dlq.UNDECODABLE
UNKNOWN_SCHEMA = dlq.UNKNOWN_SCHEMA
AGENT_ERROR = "AGENT_ERROR"  # the SDK itself failed on a record (a bug): isolated rather than fatal


Headers = list[tuple[str, bytes]]


def headers_of(msg: Message) -> Headers:
    """A record's headers as (name, bytes) pairs, whatever shape the client returned."""
    return h.pairs(msg.headers())


@dataclass(frozen=True)
class BadRecord:
    """An inbox record that is not a readable Envelope."""

    raw: bytes
    reason: str
    message: str
    message_id: str | None
    trace_id: str


@dataclass(frozen=True)
class Origin:
    """Where an inbox record came from."""

    topic: str
    partition: int
    offset: int


def read(value: bytes | None, headers: Headers) -> Envelope | BadRecord:
    """Decode an inbox record; never raises for bad bytes."""
    try:
        if value is None:
            raise codec.BadFraming("Envelope: a tombstone (null value) is not an envelope", raw=b"")
        # the reader generated from Envelope.avsc, as the router's (decision 0063); any other framing or version
        # goes through the codec, which raises its DecodeError for bytes that are no Envelope
        return codec.model_of(Envelope, avrogen.decode_dict("Envelope", value), value)
    except codec.DecodeError as exc:
        found = {k: v.decode(errors="replace") for k, v in headers}
        reason = UNKNOWN_SCHEMA if isinstance(exc, codec.UnknownSchema) else UNDECODABLE
        return BadRecord(exc.raw, reason, str(exc), found.get(h.MESSAGE_ID) or None, _trace_id(found))


def _trace_id(headers: dict[str, str]) -> str:
    traceparent = headers.get(h.TRACEPARENT, "").split("-")
    return traceparent[1] if len(traceparent) == 4 else ""


def failed(value: bytes, headers: Headers, error: BaseException) -> BadRecord:
    """A record the SDK failed on while processing it, as a BadRecord to dead-letter."""
    found = {k: v.decode(errors="replace") for k, v in headers}
    return BadRecord(value, AGENT_ERROR, f"the agent SDK failed on this record: {type(error).__name__}: {error}",
                     found.get(h.MESSAGE_ID) or None, _trace_id(found))


def by_reference(bad: BadRecord, refused: BaseException) -> BadRecord:
    """The same bad record with its bytes left out: a letter by reference, read back from its origin on replay."""
    note = f"; the {len(bad.raw):,}-byte original is not copied (its dead letter was refused: {refused}): " \
           "replay reads it from origin"
    return replace(bad, raw=b"", message=bad.message + note)


def dead_letter(bad: BadRecord, origin: Origin, agent_id: str) -> tuple[bytes, h.Headers]:
    """The encoded DeadLetter and its provenance headers."""
    error = ErrorInfo(kind="INVALID_INPUT", code=bad.reason, message=bad.message[:1000])
    return dlq.letter(bad.raw, reason=bad.reason, error=error, origin=(origin.topic, origin.partition, origin.offset),
                      agent_id=agent_id, message_id=bad.message_id)


def rejected_receipt(bad: BadRecord, agent_id: str, instance_id: str) -> Receipt | None:
    """A REJECTED receipt for a bad record whose message_id is known from its headers."""
    if not bad.message_id:
        return None
    return Receipt(
        message_id=bad.message_id, trace_id=bad.trace_id, tenant="", capability="", agent_id=agent_id,
        instance_id=instance_id, status=Status.REJECTED, at=now_ms(), step_status=StepStatus.ERROR,
        error=ErrorInfo(kind="INVALID_INPUT", code=bad.reason, message=bad.message[:1000]),
    )
