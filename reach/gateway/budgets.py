"""Spend limits at the door: an app whose day's or month's usage reached one of its limits is refused 429
`budget_exceeded` until the period resets (reach.core.spend decides; the usage counter of the stream app counts,
reach.streams.usage.counter; the counts are read from Redis through reach.spendbook).

The counts of an app are read at most once per `cache_s` per gateway process (one pipelined HMGET), so a busy app
costs Redis one read a second, not one per request. Usage is counted when a request ends, so an app may go past
its limit by what its requests in flight spend: the limit stops new requests, it does not cut running ones.
docs/decisions/0035-usage-and-spend-limits.md."""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, datetime
from typing import Protocol

from reach.callers import CallerApp
from reach.core.spend import WARN_RATIO, Exceeded, Period, Spent, Within, judge, periods
from reach.gateway.checks import Refusal
from reach.records import SpendLimit
from reach.spendbook import app_scope, tenant_scope


class SpendSource(Protocol):
    """A scope's counts in the periods asked (reach.spendbook.RedisSpendReader, MemorySpendBook)."""

    async def spent(self, scope: str, periods: Sequence[Period], now_ms: int) -> dict[Period, Spent]: ...


class Budgets:
    """The door's budget check over a SpendSource; apps without limits cost nothing."""

    def __init__(self, source: SpendSource, *, warn: float = WARN_RATIO, cache_s: float = 1.0,
                 tenants: Mapping[str, tuple[SpendLimit, ...]] | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.source = source
        self.warn = warn  # the share of a limit at which the gateway's warning gauge turns 1
        self._tenants = {tenant: found for tenant, found in (tenants or {}).items() if found}  # REACH_TENANT_LIMITS
        self._cache_s = cache_s
        self._clock = clock
        self._cached: dict[str, tuple[float, dict[Period, Spent]]] = {}

    def limited(self, app: CallerApp) -> bool:
        return bool(app.limits) or app.tenant in self._tenants

    async def judge(self, app: CallerApp, now_ms: int) -> Within | Exceeded:
        """Within or Exceeded (the app's limit first, else its tenant's, REACH_TENANT_LIMITS), with the share used
        of every limit of both for the metrics (each Use names its scope); an app without either is Within."""
        verdicts = []
        for scope, limits in ((app_scope(app.app_id), app.limits),
                              (tenant_scope(app.tenant), self._tenants.get(app.tenant, ()))):
            if limits:
                verdicts.append(judge(limits, await self._spent(scope, limits, now_ms), now_ms, scope=scope))
        uses = tuple(use for verdict in verdicts for use in verdict.uses)
        reached = next((v for v in verdicts if isinstance(v, Exceeded)), None)
        return Within(uses) if reached is None else Exceeded(reached.use, reached.reset_at_ms, uses)

    async def _spent(self, scope: str, limits: tuple[SpendLimit, ...], now_ms: int) -> dict[Period, Spent]:
        now = self._clock()
        cached = self._cached.get(scope)
        if cached is not None and now - cached[0] < self._cache_s:
            return cached[1]
        found = await self.source.spent(scope, periods(limits), now_ms)
        self._cached[scope] = (now, found)
        return found


def refusal(app: CallerApp, exceeded: Exceeded, now_ms: int) -> Refusal:
    reset = datetime.fromtimestamp(exceeded.reset_at_ms / 1000, UTC).isoformat().replace("+00:00", "Z")
    retry = max(1, -(-(exceeded.reset_at_ms - now_ms) // 1000))
    if exceeded.use.scope == tenant_scope(app.tenant):  # the tenant's limit (REACH_TENANT_LIMITS)
        whose, fix = f"tenant {app.tenant}", "an operator may raise it in REACH_TENANT_LIMITS"
    else:
        whose = f"app {app.app_id}"
        fix = f"an operator may raise it with `reach apps update {app.app_id} --limit-{exceeded.use.limit.kind} ...`"
    return Refusal(429, "budget_exceeded", f"{whose}: {exceeded.reason()}",
                   f"the limit resets at {reset} (Retry-After); {fix}",
                   headers={"Retry-After": str(retry)}, extra={"reset_at": reset})
