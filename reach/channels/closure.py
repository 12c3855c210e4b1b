"""Closing the loop (pure): the callback envelope a message's terminal outcome (or a turn's question, which a person
may answer by replying: decisions/0036) sends through its channel.

The status fold calls `settle_callback` for every receipt it folds. When a row is terminal, knows its
callback spec and has not produced its callback yet in this generation, the result is a new Envelope
for the channel capability (same trace, parent = the message, id `<message_id>-cb<generation>` so a
batch folded again produces the same one, which the channel agent's lease then dedupes), or, for a spec
that does not parse, a REJECTED receipt of that id saying why. The fold produces it inside the batch it
commits, so a callback is durable from the moment the terminal receipt is. Every terminal status sends it (the
router's REJECTED, UNROUTABLE, OVERLOAD and UNAVAILABLE, the timekeeper's EXPIRED, an agent's CANCELED ...), as
long as one receipt of the generation carried the spec. A message served by its fallback (reach.core.fallback)
sends none itself: its child carries the spec, so the caller hears once, of the chain's final outcome.
"""

from __future__ import annotations

import json
from typing import Any

from reach.channels.catalog import BY_NAME, CAPABILITY_PREFIX, CAPABILITY_VERSION
from reach.channels.errors import BadCallback
from reach.channels.select import select
from reach.channels.spec import CallbackSpec, parse
from reach.core.lifecycle import StatusRow
from reach.envelopes import BUDGET_MS, DELIVERY_TIMEOUT_MS
from reach.records import Envelope, ErrorInfo, Receipt, Status, StepStatus

SOURCE = "reach-status-fold"
UNKNOWN_CHANNEL = CAPABILITY_PREFIX + "unknown"


def callback_id(message_id: str, generation: int) -> str:
    """The callback envelope's message id: derived, so producing it again yields the same message."""
    return f"{message_id}-cb{generation}"


def settle_callback(row: StatusRow, receipt: Receipt, *, now: int) -> tuple[StatusRow, Envelope | Receipt | None]:
    """The row with its callback bookkeeping, and the callback envelope (or rejection receipt) to produce."""
    asks = row.status is Status.INPUT_REQUIRED  # a turn's question goes out too: a person may answer it by reply
    if (not row.callback or row.callback_sent or not (row.terminal or asks) or receipt.generation != row.generation
            or row.fallback_pending):  # an ending its fallback may still serve: the child may carry the callback
        return row, None
    if row.fallback is not None and row.fallback.message_id is not None:  # the child carries the callback on
        return row.model_copy(update={"callback_sent": True}), None
    done = row.model_copy(update={"callback_sent": True})
    try:
        spec = parse(row.callback)
    except BadCallback as exc:
        return done, rejected(row, row.callback, str(exc), now=now)
    return done, envelope(row, spec, now=now)


def body(row: StatusRow, spec: CallbackSpec) -> dict[str, Any]:
    """What the receiver gets: the outcome and the selected fields (a field that matched nothing is null and
    listed under `unmatched`)."""
    result, note = _result(row)
    fields, unmatched = select(result, list(spec.fields)) if spec.fields else ({}, [])
    out: dict[str, Any] = {
        "message_id": row.message_id, "trace_id": row.trace_id, "capability": row.capability,
        "status": row.status.value, "fields": fields, "unmatched": unmatched,
        "error": row.last_error.model_dump() if row.last_error and row.status is not Status.COMPLETED else None,
    }
    if note and spec.fields:
        out["note"] = note
    return out


def question(row: StatusRow) -> dict[str, Any]:
    """What the receiver of a question gets: the question and its answer's schema; the reply answers it."""
    asked = row.input
    return {"message_id": row.message_id, "trace_id": row.trace_id, "capability": row.capability,
            "status": row.status.value, "question": asked.question if asked else "",
            "answer_schema": json.loads(asked.answer_schema) if asked else {}}


def envelope(row: StatusRow, spec: CallbackSpec, *, now: int) -> Envelope:
    """The callback envelope for the channel capability; its payload is what the channel agent sends. For a question
    (INPUT_REQUIRED) it carries `answer_for`: the reply token the channel mints answers the question."""
    payload: dict[str, Any]
    if row.status is Status.INPUT_REQUIRED:
        asked = question(row)
        payload = {"endpoint": spec.endpoint, "subject": f"Reach: {row.capability} asks: {asked['question']}"[:500],
                   "body": asked, "reply_capability": row.capability,
                   "answer_for": {"message_id": row.message_id, "generation": row.generation}}
    else:
        payload = {"endpoint": spec.endpoint, "subject": f"Reach: {row.capability} {row.status.value}",
                   "body": body(row, spec), "callback_for": {"message_id": row.message_id,
                                                             "generation": row.generation,
                                                             "capability": row.capability}}
    if spec.backup is not None:
        payload["backup"] = spec.backup.to_dict()
    mid = callback_id(row.message_id, row.generation)
    return Envelope(
        message_id=mid, trace_id=row.trace_id, parent_id=row.message_id, tenant=row.tenant, source=SOURCE,
        capability=spec.capability, capability_version=f"^{CAPABILITY_VERSION}",
        payload=json.dumps(payload, separators=(",", ":")).encode(), created_at=now, deadline=now + BUDGET_MS,
        delivery_timeout_ms=DELIVERY_TIMEOUT_MS, idempotency_key=mid,
    )


def rejected(row: StatusRow, spec_text: str, reason: str, *, now: int) -> Receipt:
    """The REJECTED receipt of a callback whose spec does not parse: in the trace, with the reason."""
    name = _channel_name(spec_text)
    return Receipt(
        message_id=callback_id(row.message_id, row.generation), trace_id=row.trace_id, tenant=row.tenant,
        capability=CAPABILITY_PREFIX + name if name in BY_NAME else UNKNOWN_CHANNEL, status=Status.REJECTED,
        at=now, step_status=StepStatus.ERROR,
        error=ErrorInfo(kind="INVALID_INPUT", code="BAD_CALLBACK",
                        message=f"the callback of {row.message_id} was not sent: {reason}"[:2000]),
    )


def unroutable(callback: Envelope, *, now: int, topic: str) -> Receipt:
    """The callback's channel has no topic (no channel agent ever ran for it): a clear terminal receipt."""
    return Receipt(
        message_id=callback.message_id, trace_id=callback.trace_id, tenant=callback.tenant,
        capability=callback.capability, status=Status.UNROUTABLE, at=now, step_status=StepStatus.ERROR,
        error=ErrorInfo(kind="NO_ROUTE", code="NO_ROUTE", message=(
            f"no {callback.capability} agent: topic {topic} does not exist; start one with "
            f"`reach channels run --channel {callback.capability.removeprefix(CAPABILITY_PREFIX)}`")),
    )


def _result(row: StatusRow) -> tuple[Any, str | None]:
    if row.result is None:
        return None, "the message ended without a result"
    if row.result_truncated:
        return None, "the result was too large to select from (cut in the status table)"
    try:
        return json.loads(row.result), None
    except ValueError:
        return None, "the result is not JSON"


def _channel_name(spec_text: str) -> str:
    try:
        data = json.loads(spec_text)
    except ValueError:
        return spec_text.partition(":")[0]
    name = data.get("channel") if isinstance(data, dict) else None
    return name if isinstance(name, str) else ""


class ChannelCallbacks:
    """The status fold's callback port (`reach.streams.status.ports.Callbacks`), passed in by the stream app."""

    def settle(self, row: StatusRow, receipt: Receipt, *, now: int) -> tuple[StatusRow, Envelope | Receipt | None]:
        return settle_callback(row, receipt, now=now)

    def unroutable(self, callback: Envelope, *, now: int, topic: str) -> Receipt:
        return unroutable(callback, now=now, topic=topic)
