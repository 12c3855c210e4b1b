"""The gateway's Prometheus metrics: requests by route/status/app, quota hits, spend limits, time to 202."""

from __future__ import annotations

from collections.abc import Iterable

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

from reach.core.spend import Use
from reach.metrics import OTHER
from reach.spendbook import tenant_scope

_ACCEPT_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10)
ANONYMOUS = "-"  # requests refused before an app was known (401, 413 before auth)


class GatewayMetrics:
    """Own registry per gateway (tests build many); app labels are app ids, capability labels only known ones."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry()
        r = self.registry
        self.requests = Counter("agentreach_gateway_requests_total", "HTTP requests by route, status and app",
                                ["route", "status", "app"], registry=r)
        self.quota_hits = Counter("agentreach_gateway_quota_hits_total",
                                  "Requests refused 429 by a quota (never on the bus), by app, capability, scope",
                                  ["app", "capability", "scope"], registry=r)
        self.accept_seconds = Histogram("agentreach_gateway_accept_seconds",
                                        "Request received -> 202 (the broker acknowledged), by route",
                                        ["route"], buckets=_ACCEPT_BUCKETS, registry=r)

        self.budget_used = Gauge("agentreach_gateway_budget_used_ratio", "Share of an app's spend limit used in "
                                 "the current period", ["app", "kind", "period"], registry=r)
        self.budget_warning = Gauge("agentreach_gateway_budget_warning", "1 while an app has used at least "
                                    "REACH_GATEWAY_BUDGET_WARN of a spend limit (alert on it)",
                                    ["app", "kind", "period"], registry=r)
        self.budget_refusals = Counter("agentreach_gateway_budget_refusals_total",
                                       "Requests refused 429 budget_exceeded, by app", ["app"], registry=r)
        self.tenant_budget_used = Gauge("agentreach_gateway_tenant_budget_used_ratio", "Share of a tenant's spend "
                                        "limit (REACH_TENANT_LIMITS) used in the current period",
                                        ["tenant", "kind", "period"], registry=r)
        self.tenant_budget_warning = Gauge("agentreach_gateway_tenant_budget_warning", "1 while a tenant has used at "
                                           "least REACH_GATEWAY_BUDGET_WARN of a spend limit (alert on it)",
                                           ["tenant", "kind", "period"], registry=r)

    def budget(self, app_id: str, tenant: str, uses: Iterable[Use], *, warn: float, refused: bool) -> None:
        """Each limit's share used (as the door last judged it) and whether it is past the warning threshold: the
        app's limits by app, its tenant's (a Use of scope tenant:<t>) by tenant."""
        for use in uses:
            of_tenant = use.scope == tenant_scope(tenant)
            used, warning = ((self.tenant_budget_used, self.tenant_budget_warning) if of_tenant
                             else (self.budget_used, self.budget_warning))
            labels = (tenant if of_tenant else app_id, use.limit.kind, use.limit.period)
            used.labels(*labels).set(use.ratio)
            warning.labels(*labels).set(1 if use.ratio >= warn else 0)
        if refused:
            self.budget_refusals.labels(app_id).inc()

    def request(self, route: str, status: int, app_id: str | None) -> None:
        self.requests.labels(route, str(status), app_id or ANONYMOUS).inc()

    def quota_hit(self, app_id: str, capability: str, scope: str | None, known: bool) -> None:
        # an unregistered name would let a caller mint label values; it is counted under `other`
        self.quota_hits.labels(app_id, capability if known else OTHER, scope or "app").inc()

    def exposition(self) -> bytes:
        return generate_latest(self.registry)
