"""Tenant spend limits at the router: a request of a tenant over its limit ends FAILED BUDGET_EXCEEDED with the
time to its reset, others route; the counts are read once a second per tenant; Redis away lets requests pass."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, cast

import pytest

from reach.core.spend import Kind, Period, Spent, parse_kind_limit, parse_limit, reset_at
from reach.envelopes import now_ms
from reach.errors import ConfigError, InfraUnavailable
from reach.records import Status
from reach.settings import ReachSettings
from reach.streams.router.budgets import TenantBudgets
from tests.unit.streams.kafka_fakes import FakeProducer, settle
from tests.unit.streams.test_router import receipts, record, router

LIMITS = {"acme": (parse_limit("1000/day", Kind.TOKENS),)}


class Counts:
    """The spend counts as the usage counter left them; counts every read."""

    def __init__(self, tokens: int) -> None:
        self.tokens = tokens
        self.reads = 0

    def __call__(self, scope: str, periods: Sequence[Period], now: int) -> dict[Period, Spent]:
        self.reads += 1
        return {p: Spent(tokens=self.tokens if scope == "tenant:acme" else 0) for p in periods}


def test_a_tenant_over_its_limit_fails_budget_exceeded_and_others_route(monkeypatch: pytest.MonkeyPatch) -> None:
    r = router(monkeypatch)
    r.budgets = TenantBudgets(LIMITS, Counts(tokens=1000))
    producer = FakeProducer()
    settle(r, cast(Any, [record(0, tenant="acme"), record(1, tenant="globex")]), cast(Any, producer))
    by_tenant = {x.tenant: x for x in receipts(producer)}
    over = by_tenant["acme"]
    assert over.status is Status.FAILED and over.error is not None
    assert (over.error.kind, over.error.code) == ("BUDGET", "BUDGET_EXCEEDED")
    assert "tenant acme: tokens limit 1000/day reached" in over.error.message
    assert 0 < (over.retry_after_ms or 0) <= reset_at(Period.DAY, now_ms()) - over.at + 1000
    assert by_tenant["globex"].status is Status.ROUTED
    assert r.stats.snapshot().totals["budget_exceeded"] == 1


def test_counts_are_read_once_per_second_per_tenant_and_only_for_limited_tenants() -> None:
    counts, clock = Counts(tokens=10), [0.0]
    budgets = TenantBudgets(LIMITS, counts, clock=lambda: clock[0])
    assert budgets.exceeded("acme", now_ms()) is None and budgets.exceeded("acme", now_ms()) is None
    assert budgets.exceeded("globex", now_ms()) is None and counts.reads == 1
    counts.tokens, clock[0] = 2000, 1.5
    found = budgets.exceeded("acme", now_ms())
    assert found is not None and found.use.used == 2000 and counts.reads == 2


def test_redis_away_lets_requests_through() -> None:
    def away(*_args: object) -> dict[Period, Spent]:
        raise InfraUnavailable("redis down")

    assert TenantBudgets(LIMITS, away).exceeded("acme", now_ms()) is None


def test_tenant_limits_come_from_reach_tenant_limits(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("REACH_TENANT_LIMITS", '{"acme": ["tokens=2M/month", "cost=5.00/day"]}')
    assert ReachSettings().tenant_spend_limits() == {"acme": (parse_kind_limit("tokens=2M/month"),
                                                              parse_limit("5.00/day", Kind.COST))}
    monkeypatch.setenv("REACH_TENANT_LIMITS", '{"acme": ["2M/month"]}')
    with pytest.raises(ConfigError, match="REACH_TENANT_LIMITS\\['acme'\\].*KIND=AMOUNT/PERIOD"):
        ReachSettings()
