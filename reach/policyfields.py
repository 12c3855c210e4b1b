"""The POLICY fields: name, unit, built-in default and where each applies; the one list that `reach policy`,
the effective-policy lookup and the consistency check derive from. Pure: no Kafka, no Redis."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from reach import envelopes
from reach.core import retry
from reach.core.durations import format_ms, parse_ms
from reach.records import Policy

Unit = Literal["count", "duration", "flag", "capability"]


@dataclass(frozen=True)
class PolicyField:
    """One POLICY field as operators see it."""

    name: str            # the Policy attribute
    option: str          # the `reach policy set` option
    unit: Unit
    default: int | bool | None  # the built-in value when no control record sets it (None: derived elsewhere, or none)
    applies: str         # who enforces it, for `reach policy show` and the docs


FIELDS: tuple[PolicyField, ...] = (
    PolicyField("max_attempts", "--max-attempts", "count", retry.DEFAULT_MAX_ATTEMPTS,
                "SDK and timekeeper (reach.failures.after_failure), when the envelope sets none"),
    PolicyField("backoff_base_ms", "--backoff-base", "duration", retry.DEFAULT_BACKOFF_BASE_MS,
                "SDK and timekeeper retry backoff"),
    PolicyField("backoff_max_ms", "--backoff-max", "duration", retry.DEFAULT_BACKOFF_MAX_MS,
                "SDK and timekeeper retry backoff cap"),
    PolicyField("delivery_timeout_ms", "--delivery-timeout", "duration", envelopes.DELIVERY_TIMEOUT_MS,
                "client at send time; the timekeeper reroutes on the envelope's value"),
    PolicyField("execution_timeout_ms", "--execution-timeout", "duration", None,
                "SDK: caps each run (the agent's declared timeout, the caller's ask); default no cap"),
    PolicyField("budget_ms", "--budget", "duration", envelopes.BUDGET_MS,
                "client at send time (deadline); timekeeper expires at it; no retry planned past it"),
    PolicyField("validate_at_router", "--validate-at-router", "flag", False,
                "router checks the payload against the capability's input schema"),
    PolicyField("idempotency_window_ms", "--idempotency-window", "duration", 24 * 3600 * 1000,
                "SDK keeps a COMPLETED result of an idempotency_key this long"),
    PolicyField("slow_threshold_ms", "--slow-threshold", "duration", None,
                "health: slower calls count as slow (default 3 x the capability's p50)"),
    PolicyField("handoff", "--handoff", "flag", False,
                "router: a request no instance can serve goes to a human (<ns>.handoff) instead of UNROUTABLE"),
    PolicyField("fallback", "--fallback", "capability", None,
                "router (its UNROUTABLE, OVERLOAD, UNAVAILABLE) and status fold (an agent's FAILED, DEAD_LETTERED): "
                "the request goes on to this capability, a child of its trace (`none` clears it)"),
    PolicyField("dead_after_ms", "--dead-after", "duration", 7 * 24 * 3600 * 1000,
                "dead-letter warden: a letter nobody redrove this long is DEAD and its agent's owner is told"),
)
BY_NAME = {f.name: f for f in FIELDS}


def parse_duration(text: str, *, option: str) -> int:
    """`200ms`, `5s`, `2m`, `24h` -> milliseconds; a bare number is milliseconds. BadDuration (a ConfigError)
    otherwise."""
    return parse_ms(text, bare="ms", what=option, hint="expected e.g. 200ms, 5s, 2m or 24h.")


def effective(policy: Policy, sources: dict[str, str]) -> list[tuple[PolicyField, Any, str]]:
    """Per field: the value in force and where it comes from (a scope, or `default`)."""
    rows = []
    for spec in FIELDS:
        scope = sources.get(spec.name)
        value = getattr(policy, spec.name) if scope is not None else spec.default
        rows.append((spec, value, scope or "default"))
    return rows


def show(spec: PolicyField, value: Any) -> str:
    """A value as operators write it (durations with their unit)."""
    if value is None:
        return "-"
    if spec.unit == "duration":
        return format_ms(int(value))
    return str(value).lower() if spec.unit == "flag" else str(value)


def value_of(policy: Policy, name: str) -> Any:
    """The policy's value of a field, else its built-in default."""
    value = getattr(policy, name)
    return BY_NAME[name].default if value is None else value


def check(policy: Policy, tiers: list[str]) -> list[str]:
    """Tier, backoff and budget settings that contradict each other. Warnings, not errors: everything still
    works, but a setting the others make unreachable does nothing."""
    values = {spec.name: value_of(policy, spec.name) for spec in FIELDS}
    limits = retry.Limits(max_attempts=int(values["max_attempts"]), base_ms=int(values["backoff_base_ms"]),
                          max_ms=int(values["backoff_max_ms"]))
    budget = int(values["budget_ms"])
    warnings = []
    if limits.max_ms < limits.base_ms:
        warnings.append(f"backoff max {format_ms(limits.max_ms)} is below backoff base {format_ms(limits.base_ms)}: "
                        "every retry waits the max")
    delays = [retry.backoff_ms(a, limits)[0] for a in range(1, limits.max_attempts)]
    # an agent's retry-after hint may ask for any delay up to the backoff max: every tier up to the one covering
    # the longest reachable delay can be used, a longer one never
    longest = max(int(max(delays, default=0) * retry.JITTER[1]), limits.max_ms)
    if tiers and limits.max_attempts > 1:
        top = retry.tier_ms(retry.tier_for(longest, tiers))
        for tier in sorted(tiers, key=retry.tier_ms):
            if retry.tier_ms(tier) > top:
                warnings.append(f"retry tier {tier} is longer than any reachable backoff (at most {format_ms(longest)} "
                                f"with {limits.max_attempts} attempts, base {format_ms(limits.base_ms)}, max "
                                f"{format_ms(limits.max_ms)}): no retry lands in it")
    spent, fit = 0, 1
    for delay in delays:
        spent += delay
        if spent >= budget:
            break
        fit += 1
    if fit < limits.max_attempts:
        warnings.append(f"budget {format_ms(budget)} ends before the backoffs of {limits.max_attempts} attempts "
                        f"(only {fit} fit, without run time): later retries end EXPIRED")
    return warnings
