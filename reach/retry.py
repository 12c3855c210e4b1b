"""Retry policy, pure: failure classes -> actions, backoff with jitter, delay tiers, attempt limits, and
`after_failure`, the one decision of what follows a failure (the records to produce), used by the agent SDK
and the timekeeper alike."""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from reach import codec, dlq, headers
from reach.envelopes import routing_key
from reach.names import Names
from reach.receipts import receipt_for
from reach.records import Envelope, ErrorInfo, Policy, Receipt, Status

DEFAULT_MAX_ATTEMPTS = 4
DEFAULT_BACKOFF_BASE_MS = 200
DEFAULT_BACKOFF_MAX_MS = 30_000
MAX_REROUTES = 3
JITTER = (0.8, 1.2)


class Failure(StrEnum):
    """What went wrong, as seen by whoever saw it."""

    DELIVERY = "delivery"          # instance offline, inbox produce failed, delivery timeout
    TRANSIENT = "transient"        # ATTEMPT_FAILED: retryable error or execution timeout
    BUSINESS = "business"          # the agent said no, for a reason that will not change
    FAULTY_ENVELOPE = "faulty"     # undecodable, invalid contract, ...
    BUDGET_SPENT = "budget"        # created_at -> deadline elapsed


class Action(StrEnum):
    """What Reach does about it."""

    REROUTE = "reroute"            # next candidate, reroutes+1, not an attempt
    RETRY = "retry"                # delay tier, attempt+1, this instance excluded
    FAIL = "fail"                  # FAILED, terminal
    REJECT = "reject"              # REJECTED, terminal
    DEAD_LETTER = "dead_letter"    # DEAD_LETTERED (RETRIES_EXHAUSTED / NO_ROUTE), terminal
    EXPIRE = "expire"              # EXPIRED, terminal, no dead letter


@dataclass(frozen=True)
class Limits:
    """The attempt and backoff limits that apply to one envelope."""

    max_attempts: int = DEFAULT_MAX_ATTEMPTS
    base_ms: int = DEFAULT_BACKOFF_BASE_MS
    max_ms: int = DEFAULT_BACKOFF_MAX_MS

    @classmethod
    def resolve(cls, envelope: Envelope, policy: Policy | None = None) -> Limits:
        """Envelope value when > 0, else the capability's control POLICY, else the default."""
        policy_attempts = policy.max_attempts if policy and policy.max_attempts else None
        return cls(
            max_attempts=(envelope.max_attempts if envelope.max_attempts > 0
                          else policy_attempts or DEFAULT_MAX_ATTEMPTS),
            base_ms=(policy.backoff_base_ms if policy and policy.backoff_base_ms else DEFAULT_BACKOFF_BASE_MS),
            max_ms=(policy.backoff_max_ms if policy and policy.backoff_max_ms else DEFAULT_BACKOFF_MAX_MS),
        )


def classify(
    failure: Failure, *, attempt: int, reroutes: int, limits: Limits, now_ms: int, deadline_ms: int
) -> Action:
    """The action for a failure of attempt `attempt` (1-based) after `reroutes` reroutes."""
    if failure is Failure.FAULTY_ENVELOPE:
        return Action.REJECT
    if failure is Failure.BUSINESS:
        return Action.FAIL
    if failure is Failure.BUDGET_SPENT or now_ms >= deadline_ms:
        return Action.EXPIRE
    if failure is Failure.DELIVERY:
        if reroutes < MAX_REROUTES:
            return Action.REROUTE
        failure = Failure.TRANSIENT  # out of reroutes: it becomes an ordinary failed attempt
    if attempt >= limits.max_attempts:
        return Action.DEAD_LETTER
    return Action.RETRY


def backoff_ms(attempt: int, limits: Limits, rng: random.Random | None = None) -> tuple[int, int]:
    """(nominal, jittered) delay before attempt `attempt + 1`: min(base*2^(attempt-1), max) * U(0.8, 1.2)."""
    nominal = min(limits.base_ms * 2 ** max(0, attempt - 1), limits.max_ms)
    return nominal, int(nominal * (rng or random).uniform(*JITTER))


def tier_for(delay_ms: int, tiers: list[str]) -> str:
    """The shortest tier at least as long as the delay, else the longest.

    A tier's consumer holds its head record until that record's own due time, so a record can wait
    behind a later-due one of the same tier: lateness is bounded by the tier's length. Putting each
    delay in the shortest tier that covers it keeps that bound tight."""
    by_ms = sorted(tiers, key=tier_ms)
    covering = [t for t in by_ms if tier_ms(t) >= delay_ms]
    return covering[0] if covering else by_ms[-1]


def tier_ms(tier: str) -> int:
    """`1s` -> 1000, `500ms` -> 500, `10m` -> 600000."""
    units = {"ms": 1, "s": 1000, "m": 60_000, "h": 3_600_000}
    for suffix in ("ms", "s", "m", "h"):
        if tier.endswith(suffix) and tier[: -len(suffix)].isdigit():
            return int(tier[: -len(suffix)]) * units[suffix]
    raise ValueError(f"retry tier {tier!r} must look like 500ms, 1s, 10s, 5m or 1h")


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
                    [(headers.MESSAGE_ID, receipt.message_id.encode())])
