"""Retry policy, pure: failure classes -> actions, backoff with jitter, delay tiers and attempt limits. The
records that follow a failure (`after_failure`, used by the agent SDK and the timekeeper alike) are reach.failures."""

from __future__ import annotations

import random
from dataclasses import dataclass
from enum import StrEnum

from reach.core.durations import parse_ms
from reach.records import Envelope, Policy

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
    """`1s` -> 1000, `500ms` -> 500, `10m` -> 600000 (reach.core.durations; a tier needs its unit)."""
    return parse_ms(tier, what="retry tier", hint="it must look like 500ms, 1s, 10s, 5m or 1h")
