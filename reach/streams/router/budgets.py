"""Tenant spend limits at the router: a request of a tenant whose day's or month's usage reached one of its limits
(REACH_TENANT_LIMITS) ends FAILED `BUDGET_EXCEEDED` instead of being routed, whoever produced it (the gateway, or a
producer writing to the capability topic directly). The gateway refuses the same tenant's requests at the door
(reach.gateway.budgets); this is the check nobody bypasses.

The counts are the usage counter's (reach.streams.usage.counter), read through reach.spendbook at most once per
`cache_s` per tenant, so a limited tenant costs the hot path one Redis read a second, an unlimited one nothing. Redis
not answering lets requests through (logged at most once a minute): a spend limit is not worth stopping routing
for; the gateway, which fails closed, still holds its door. docs/decisions/0035-usage-and-spend-limits.md."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, datetime

from reach.core.spend import Exceeded, Period, Spent, judge, periods
from reach.errors import InfraUnavailable
from reach.records import SpendLimit
from reach.spendbook import tenant_scope

log = logging.getLogger("reach.router")
Read = Callable[[str, Sequence[Period], int], dict[Period, Spent]]
"""A scope's counts in the periods asked, at a time (reach.spendbook.RedisSpendBook.spent)."""
WARN_EVERY_S = 60.0


class TenantBudgets:
    """Whether a tenant's spend limits let one more request through; `read` is called lazily (no Redis client is
    made for a deployment without tenant limits)."""

    def __init__(self, limits: Mapping[str, tuple[SpendLimit, ...]], read: Read, *, cache_s: float = 1.0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._limits = {tenant: found for tenant, found in limits.items() if found}
        self._read = read
        self._cache_s = cache_s
        self._clock = clock
        self._cached: dict[str, tuple[float, Exceeded | None]] = {}
        self._warned_at = float("-inf")

    def exceeded(self, tenant: str, now_ms: int) -> Exceeded | None:
        """The reached limit of the tenant, or None (no limits, within them, or the counts unreadable)."""
        limits = self._limits.get(tenant)
        if limits is None:
            return None
        now = self._clock()
        cached = self._cached.get(tenant)
        if cached is not None and now - cached[0] < self._cache_s:
            return cached[1]
        try:
            verdict = judge(limits, self._read(tenant_scope(tenant), periods(limits), now_ms), now_ms)
        except InfraUnavailable as exc:
            if now - self._warned_at >= WARN_EVERY_S:
                self._warned_at = now
                log.warning("tenant spend limits not checked (requests pass): %s", exc)
            return None
        found = verdict if isinstance(verdict, Exceeded) else None
        self._cached[tenant] = (now, found)
        return found


def budget_message(tenant: str, exceeded: Exceeded) -> str:
    reset = datetime.fromtimestamp(exceeded.reset_at_ms / 1000, UTC).isoformat().replace("+00:00", "Z")
    return f"tenant {tenant}: {exceeded.reason()}; it resets at {reset}"
