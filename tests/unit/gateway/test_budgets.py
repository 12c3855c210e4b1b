"""Spend limits at the door on in-memory fakes: 429 budget_exceeded with the reset time once a limit is reached,
the warning gauge past 80%, nothing published and no quota token spent for a refused request."""

from __future__ import annotations

import json
from dataclasses import replace
from datetime import UTC, datetime

from fastapi.testclient import TestClient

from reach.callers import KeyEntry
from reach.channels.settings import ClosureSettings
from reach.core.spend import Kind, Period, parse_limit, reset_at
from reach.envelopes import now_ms
from reach.gateway.budgets import Budgets
from reach.gateway.httpsettings import HttpSettings
from reach.gateway.metrics import GatewayMetrics
from reach.gateway.service import build_gateway
from reach.spendbook import Charge, MemorySpendBook
from tests.unit.gateway.fakes import Fakes, app, sign

NOW = now_ms()  # the door checks signatures on the real clock
RESET = datetime.fromtimestamp(reset_at(Period.DAY, NOW) / 1000, UTC).isoformat().replace("+00:00", "Z")
BODY = json.dumps({"capability": "demo.echo", "payload": {"text": "hi"}}).encode()


def gateway(spent_tokens: int) -> tuple[TestClient, Fakes, GatewayMetrics]:
    limited = replace(app(), limits=(parse_limit("1000/day", Kind.TOKENS),))
    fakes = Fakes(keys=[KeyEntry("key1", limited, b"secret-1")])
    book = MemorySpendBook()
    book.record([Charge(scope="app:app1", message_id="m0", generation=0, at_ms=NOW, tokens=spent_tokens,
                        cost_micros=0)])
    deps = replace(fakes.deps(), budgets=Budgets(book, cache_s=0))
    metrics = GatewayMetrics()
    return TestClient(build_gateway(deps, HttpSettings(), closure=ClosureSettings(), metrics=metrics)), fakes, metrics


def post(client: TestClient) -> tuple[int, dict[str, object], dict[str, str]]:
    resp = client.post("/v1/envelopes", content=BODY, headers={
        "Reach-Key": "key1", "Reach-Signature": sign(b"secret-1", BODY), "Content-Type": "application/json"})
    return resp.status_code, resp.json(), dict(resp.headers)


def test_below_the_limit_is_accepted_and_past_the_warning_threshold_the_gauge_says_so() -> None:
    client, fakes, metrics = gateway(spent_tokens=850)
    status, _body, _headers = post(client)
    assert status == 202 and len(fakes.publisher.sent) == 1
    labels = {"app": "app1", "kind": "tokens", "period": "day"}
    assert metrics.registry.get_sample_value("agentreach_gateway_budget_used_ratio", labels) == 0.85
    assert metrics.registry.get_sample_value("agentreach_gateway_budget_warning", labels) == 1


def test_at_the_limit_the_door_answers_429_budget_exceeded_with_the_reset_time() -> None:
    client, fakes, metrics = gateway(spent_tokens=1000)
    status, body, headers = post(client)
    assert status == 429
    assert body["error"] == "budget_exceeded" and body["reset_at"] == RESET
    assert "tokens limit 1000/day reached" in str(body["message"]) and RESET in str(body["hint"])
    assert 0 < int(headers["retry-after"]) <= 24 * 3600
    assert fakes.publisher.sent == [] and fakes.quotas.taken == 0
    assert metrics.registry.get_sample_value("agentreach_gateway_budget_refusals_total", {"app": "app1"}) == 1


def test_an_app_without_limits_is_never_read() -> None:
    fakes = Fakes()

    class Unreadable(MemorySpendBook):
        async def spent(self, *args: object, **kwargs: object) -> dict:  # type: ignore[type-arg, override]
            raise AssertionError("an app without limits costs no read")

    deps = replace(fakes.deps(), budgets=Budgets(Unreadable()))
    client = TestClient(build_gateway(deps, HttpSettings(), closure=ClosureSettings()))
    assert post(client)[0] == 202


def test_a_tenant_over_its_limit_is_refused_for_every_app_of_it() -> None:
    fakes = Fakes()  # app1 of tenant acme, without limits of its own
    book = MemorySpendBook()
    book.record([Charge(scope="tenant:acme", message_id="m0", generation=0, at_ms=NOW, tokens=0,
                        cost_micros=5_000_000)])
    tenants = {"acme": (parse_limit("5.00/day", Kind.COST),)}
    deps = replace(fakes.deps(), budgets=Budgets(book, cache_s=0, tenants=tenants))
    client = TestClient(build_gateway(deps, HttpSettings(), closure=ClosureSettings()))
    status, body, _headers = post(client)
    assert status == 429 and body["error"] == "budget_exceeded" and body["reset_at"] == RESET
    assert str(body["message"]).startswith("tenant acme: cost limit 5.00/day reached (5.00 counted this day)")
    assert "REACH_TENANT_LIMITS" in str(body["hint"]) and fakes.publisher.sent == []


def test_the_tenant_warning_gauge_follows_the_tenants_limit() -> None:
    book = MemorySpendBook()
    book.record([Charge(scope="tenant:acme", message_id="m0", generation=0, at_ms=NOW, tokens=900, cost_micros=0)])
    tenants = {"acme": (parse_limit("1000/day", Kind.TOKENS),)}
    metrics = GatewayMetrics()
    deps = replace(Fakes().deps(), budgets=Budgets(book, cache_s=0, tenants=tenants))
    client = TestClient(build_gateway(deps, HttpSettings(), closure=ClosureSettings(), metrics=metrics))
    assert post(client)[0] == 202
    labels = {"tenant": "acme", "kind": "tokens", "period": "day"}
    assert metrics.registry.get_sample_value("agentreach_gateway_tenant_budget_used_ratio", labels) == 0.9
    assert metrics.registry.get_sample_value("agentreach_gateway_tenant_budget_warning", labels) == 1
