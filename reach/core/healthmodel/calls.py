"""Which receipts are calls of an instance, and whether each call counts against it (pure).

A call is one attempt the instance ran: COMPLETED (a success, with `timings.run_ms`), ATTEMPT_FAILED
(a retryable failure) or an agent's FAILED (a definite one). Failures are the instance's fault unless
their kind says the request was (BUSINESS, INVALID_INPUT), the clock ran out (BUDGET) or the destination the
caller chose failed (DESTINATION): those calls
count as answered, so the instance's success rate says whether it works, not whether callers send good
requests. OVERLOAD-class failures (kind OVERLOAD, or a rate-limit code) count as failures and feed the
overload rule. Router receipts carry no instance of theirs (ROUTED names the instance picked, not one
that ran), RETRY_SCHEDULED / DEAD_LETTERED repeat the ATTEMPT_FAILED before them, and republished
results (`cache_hit`, `status_hit`) are not runs: none of them is a call.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from reach.core.breaker import Outcome
from reach.records import Status

NOT_THE_INSTANCE = frozenset({"BUSINESS", "INVALID_INPUT", "BUDGET", "DESTINATION"})
"""Error kinds that say nothing about the instance: the caller's request or budget was at fault, or the destination
the caller chose (a webhook receiver that answers 429 or 5xx, or whose channel health is OPEN: one tenant's
receiver must not take the channel instance out of routing for every tenant)."""
OVERLOAD_KINDS = frozenset({"OVERLOAD"})
OVERLOAD_CODES = frozenset({"OVERLOAD", "OVERLOADED", "RATE_LIMITED", "RATE_LIMIT", "TOO_MANY_REQUESTS", "THROTTLED",
                            "429", "CHANNEL_OPEN"})
"""Codes an agent raises (`TransientError(code=...)`) for a rate limit or overload: the 429 class. CHANNEL_OPEN is a
channel agent refusing while its channel health is OPEN (reach/channels/board.py): its instance breaker opens, so
the router leaves it out."""
TIMEOUT_KINDS = frozenset({"TIMEOUT"})
"""A call that ran out of its execution timeout was slow as well as failed."""
_CALLS = frozenset({Status.COMPLETED.value, Status.ATTEMPT_FAILED.value, Status.FAILED.value,
                    Status.INPUT_REQUIRED.value})
_SUCCEEDED = frozenset({Status.COMPLETED.value, Status.INPUT_REQUIRED.value})  # a turn that asked ran fine too
_REPUBLISHED = ("cache_hit", "status_hit")


@dataclass(frozen=True, slots=True)
class Call:
    """One attempt an instance ran, as health counts it."""

    instance_id: str
    agent_id: str
    capability: str
    at: int
    outcome: Outcome
    run_ms: int | None = None
    timed_out: bool = False


def call_of(receipt: Mapping[str, Any]) -> Call | None:
    """The call a decoded receipt (`decode_dict("Receipt", ...)`) reports, or None when it is not one."""
    status = receipt.get("status")
    instance_id = receipt.get("instance_id")
    if status not in _CALLS or not instance_id:
        return None
    timings: Mapping[str, int] = receipt.get("timings") or {}
    if any(k in timings for k in _REPUBLISHED):
        return None
    run_ms = timings.get("run_ms")
    error: Mapping[str, Any] | None = receipt.get("error")
    kind = str(error.get("kind", "")) if error else ""
    code = str(error.get("code", "")) if error else ""
    if status in _SUCCEEDED or kind in NOT_THE_INSTANCE:
        outcome = Outcome.SUCCESS
    elif kind in OVERLOAD_KINDS or code.upper() in OVERLOAD_CODES:
        outcome = Outcome.OVERLOAD
    else:
        outcome = Outcome.FAILURE
    return Call(instance_id=str(instance_id), agent_id=str(receipt.get("agent_id") or ""),
                capability=str(receipt.get("capability") or ""), at=int(receipt["at"]), outcome=outcome,
                run_ms=int(run_ms) if run_ms is not None else None, timed_out=kind in TIMEOUT_KINDS)
