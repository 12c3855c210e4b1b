"""Receipts: one per step of a message, keyed by message_id on the receipts topic."""

from __future__ import annotations

from typing import Any

from reach.envelopes import now_ms
from reach.kafka import codec
from reach.kafka.receiptbytes import flat_writer
from reach.records import Envelope, ErrorInfo, Receipt, Status


def receipt_for(
    envelope: Envelope,
    status: Status,
    *,
    agent_id: str | None = None,
    instance_id: str | None = None,
    error: ErrorInfo | None = None,
    at: int | None = None,
    **fields: Any,
) -> Receipt:
    """A receipt for `envelope` at this step (the envelope's trace, attempt and generation, and its callback
    spec, which the status fold acts on when the message ends); `at` is now unless the caller took its time."""
    fields.setdefault("callback", envelope.callback)
    return Receipt(
        message_id=envelope.message_id,
        generation=envelope.generation,
        trace_id=envelope.trace_id,
        tenant=envelope.tenant,
        capability=envelope.capability,
        agent_id=agent_id,
        instance_id=instance_id,
        status=status,
        attempt=envelope.attempt,
        at=now_ms() if at is None else at,
        error=error,
        deadline=envelope.deadline,
        delivery_timeout_ms=envelope.delivery_timeout_ms,
        reroutes=envelope.reroutes,
        **fields,
    )


def started_bytes(envelope: Envelope, *, agent_id: str, instance_id: str) -> bytes:
    """`codec.encode(receipt_for(envelope, Status.STARTED, ...))` without building the model (the agent's hot
    path; the writer reach.kafka.receiptbytes generates from Receipt.avsc), by the codec when it does not apply."""
    writer = flat_writer()
    if writer is None:
        return codec.encode(receipt_for(envelope, Status.STARTED, agent_id=agent_id, instance_id=instance_id))
    return writer.encode(
        message_id=envelope.message_id, generation=envelope.generation, trace_id=envelope.trace_id,
        tenant=envelope.tenant, capability=envelope.capability, agent_id=agent_id, instance_id=instance_id,
        status=Status.STARTED, attempt=envelope.attempt, at=now_ms(), deadline=envelope.deadline,
        delivery_timeout_ms=envelope.delivery_timeout_ms, reroutes=envelope.reroutes, callback=envelope.callback,
    )


def error(kind: str, code: str, message: str) -> ErrorInfo:
    return ErrorInfo(kind=kind, code=code, message=message)
