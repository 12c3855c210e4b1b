"""`after_failure`, the one decision of what follows a failure (the records to produce), used by the agent SDK
and the timekeeper alike; the pure failure classes, backoff, delay tiers and attempt limits are reach.core.retry."""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from reach import dlq
from reach.core.retry import Action, Failure, Limits, backoff_ms, classify, tier_for
from reach.envelopes import routing_key
from reach.kafka import codec, headers
from reach.names import Names
from reach.receipts import receipt_for
from reach.records import Envelope, ErrorInfo, Receipt, Status


@dataclass(frozen=True)
class Outgoing:
    """One record to produce."""

    topic: str
    key: str
    value: bytes | None
    headers: headers.Headers


@dataclass(frozen=True)
class PlannedRetry:
    """The record to produce to a delay tier, and the receipt facts that go with it."""

    record: Outgoing
    envelope: Envelope
    due_at: int
    delay_ms: int
    nominal_ms: int


def plan_retry(envelope: Envelope, *, names: Names, tiers: list[str], limits: Limits, failed_instance: str | None,
               now_ms: int, retry_after_ms: int | None = None, rng: random.Random | None = None) -> PlannedRetry:
    """Attempt+1 with the failed instance excluded, due after the jittered backoff (or the agent's hint)."""
    nominal, delay = backoff_ms(envelope.attempt, limits, rng)
    if retry_after_ms:
        nominal = delay = min(retry_after_ms, limits.max_ms)
    nxt = envelope.model_copy(update={"attempt": envelope.attempt + 1, "reroutes": 0,
                                      "excluded_instances": _excluding(envelope, failed_instance)})
    due = now_ms + delay
    target = names.capability(envelope.capability)
    hdrs: headers.Headers = [(headers.DUE_AT, str(due).encode()), (headers.TARGET, target.encode()),
                             (headers.MESSAGE_ID, envelope.message_id.encode())]
    record = Outgoing(names.retry(tier_for(delay, tiers)), routing_key(nxt), codec.encode(nxt), hdrs)
    return PlannedRetry(record=record, envelope=nxt, due_at=due, delay_ms=delay, nominal_ms=nominal)


@dataclass(frozen=True)
class AfterFailure:
    """What follows a failure: the action and the records to produce, in order (the receipt is last)."""

    action: Action
    records: tuple[Outgoing, ...]
    receipt: Receipt


def after_failure(failure: Failure, envelope: Envelope, *, error: ErrorInfo, names: Names, tiers: list[str],
                  limits: Limits, now_ms: int, failed_instance: str | None, raw: bytes,
                  origin: tuple[str, int, int], agent_id: str | None = None, instance_id: str | None = None,
                  retry_after_ms: int | None = None, rng: random.Random | None = None) -> AfterFailure:
    """Reroute, retry on a delay tier, dead-letter or expire `envelope` after `failure` (described by `error`).

    The retry or dead letter comes before its receipt (Uber's order): a crash in between redoes the
    decision, never leaves a receipt without its record. `raw` are the original bytes a dead letter keeps."""
    action = classify(failure, attempt=envelope.attempt, reroutes=envelope.reroutes, limits=limits, now_ms=now_ms,
                      deadline_ms=envelope.deadline)

    def receipt(status: Status, **fields: Any) -> Receipt:
        return receipt_for(envelope, status, agent_id=agent_id, instance_id=instance_id, **fields)

    if action is Action.REROUTE:
        nxt = envelope.model_copy(update={"reroutes": envelope.reroutes + 1,
                                          "excluded_instances": _excluding(envelope, failed_instance)})
        done = receipt(Status.ACCEPTED, error=error).model_copy(update={"reroutes": nxt.reroutes})
        forward = Outgoing(names.capability(envelope.capability), routing_key(nxt), codec.encode(nxt), [])
        return AfterFailure(action, (forward, _receipt_record(names, done)), done)
    last = f"{error.code}: {error.message}"
    if action is Action.RETRY:
        plan = plan_retry(envelope, names=names, tiers=tiers, limits=limits, failed_instance=failed_instance,
                          now_ms=now_ms, retry_after_ms=retry_after_ms, rng=rng)
        if plan.due_at >= envelope.deadline:  # it could only run after the budget ended: do not schedule it
            return _expired(names, receipt, f"the retry would be due at {plan.due_at}, at or after the deadline "
                            f"{envelope.deadline}; last error: {last}")
        done = receipt(Status.RETRY_SCHEDULED, error=error, due_at=plan.due_at, retry_after_ms=plan.delay_ms,
                       timings={"nominal_delay_ms": plan.nominal_ms})
        return AfterFailure(action, (plan.record, _receipt_record(names, done)), done)
    if action is Action.DEAD_LETTER:
        final = ErrorInfo(kind=error.kind, code=dlq.RETRIES_EXHAUSTED,
                          message=f"{envelope.attempt} of {limits.max_attempts} attempts failed; last: {last}"[:1000])
        value, hdrs = dlq.letter(raw, reason=dlq.RETRIES_EXHAUSTED, error=final, origin=origin, envelope=envelope,
                                 agent_id=agent_id)
        done = receipt(Status.DEAD_LETTERED, error=final)
        letter = Outgoing(names.dlq, envelope.message_id, value, hdrs)
        return AfterFailure(action, (letter, _receipt_record(names, done)), done)
    if action is not Action.EXPIRE:
        raise ValueError(f"after_failure decides delivery and transient failures, not {failure}")
    return _expired(names, receipt, f"the total budget ended before a retry could run; last error: {last}")


def _expired(names: Names, receipt: Callable[..., Receipt], why: str) -> AfterFailure:
    done = receipt(Status.EXPIRED, error=ErrorInfo(kind="BUDGET", code="DEADLINE_EXCEEDED", message=why[:1000]))
    return AfterFailure(Action.EXPIRE, (_receipt_record(names, done),), done)


def _excluding(envelope: Envelope, instance: str | None) -> list[str]:
    excluded = list(envelope.excluded_instances)
    if instance and instance not in excluded:
        excluded.append(instance)
    return excluded


def _receipt_record(names: Names, receipt: Receipt) -> Outgoing:
    return Outgoing(names.receipts, receipt.message_id, codec.encode(receipt),
                    [(headers.MESSAGE_ID, receipt.message_id.encode()), headers.status_header(receipt.status.name)])
