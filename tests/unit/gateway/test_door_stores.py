"""Nonces and quotas: the in-memory fakes follow the rule the Redis versions share; Redis down is a 503."""

from __future__ import annotations

import asyncio
import socket

import pytest

from reach.callers import CallerApp
from reach.errors import InfraUnavailable
from reach.gateway.nonces import MemoryNonceStore, RedisNonceStore
from reach.gateway.ports import NonceStore, QuotaDecision, Quotas
from reach.gateway.quotas import Limit, MemoryQuotas, RedisQuotas, retry_after_header
from reach.gateway.redisconn import door_client
from reach.gateway.settings import GatewaySettings


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


_LOOP = asyncio.new_event_loop()  # one loop for the module's stores (their calls are coroutines)
run = _LOOP.run_until_complete
APP = CallerApp(app_id="app_1", name="a", tenant="t", capabilities=(), rate=2.0, burst=3)


def test_a_nonce_is_claimed_once_within_its_ttl_then_forgotten() -> None:
    clock = Clock()
    store: NonceStore = MemoryNonceStore(clock)
    assert run(store.claim("app_1", "n-0000001", 10))
    assert not run(store.claim("app_1", "n-0000001", 10))
    assert run(store.claim("app_2", "n-0000001", 10))  # another scope
    clock.now += 10
    assert run(store.claim("app_1", "n-0000001", 10))


def test_the_memory_nonce_store_forgets_expired_nonces() -> None:
    clock = Clock()
    store = MemoryNonceStore(clock)
    for i in range(5000):
        assert run(store.claim("a", f"nonce-{i:06}", 1))
        clock.now += 0.01
    assert len(store._until) < 2048  # noqa: SLF001 - the bound is the point of this test


def test_the_app_bucket_refuses_with_the_time_to_the_next_token() -> None:
    clock = Clock()
    quotas: Quotas = MemoryQuotas(clock=clock)
    assert [run(quotas.take(APP, "search.web")).allowed for _ in range(4)] == [True, True, True, False]
    refused = run(quotas.take(APP, "search.web"))
    assert refused == QuotaDecision(allowed=False, retry_after_s=pytest.approx(0.5), scope="app")
    assert retry_after_header(refused) == "1"
    clock.now += 0.5
    assert run(quotas.take(APP, "search.web")).allowed


def test_the_capability_cap_is_shared_by_apps_and_a_refusal_spends_nothing() -> None:
    clock = Clock()
    caps = {"search.web": Limit(rate=1.0, burst=2)}
    quotas = MemoryQuotas(capability_limit=caps.get, clock=clock)
    other = CallerApp(app_id="app_2", name="b", tenant="t", capabilities=(), rate=100.0, burst=100)
    assert run(quotas.take(APP, "search.web")).allowed and run(quotas.take(other, "search.web")).allowed
    refused = run(quotas.take(other, "search.web"))
    assert (refused.allowed, refused.scope, refused.retry_after_s) == (False, "capability", pytest.approx(1.0))
    assert run(quotas.take(APP, "search.news")).allowed  # uncapped capability; the app still had a token
    assert run(quotas.take(APP, "search.news")).allowed  # its third: the refused search.web call spent none
    assert not run(quotas.take(APP, "search.news")).allowed


def test_a_changed_app_quota_reshapes_its_bucket() -> None:
    clock = Clock()
    quotas = MemoryQuotas(clock=clock)
    for _ in range(3):
        assert run(quotas.take(APP, "c")).allowed
    smaller = CallerApp(app_id="app_1", name="a", tenant="t", capabilities=(), rate=10.0, burst=1)
    assert not run(quotas.take(smaller, "c")).allowed
    clock.now += 0.1
    assert run(quotas.take(smaller, "c")).allowed and not run(quotas.take(smaller, "c")).allowed


def test_capability_limits_come_from_the_settings() -> None:
    settings = GatewaySettings(capability_rate=50.5, capability_limits={"search.web": (500.0, 1000)})
    assert settings.capability_limit("search.web") == Limit(rate=500.0, burst=1000)
    assert settings.capability_limit("other") == Limit(rate=50.5, burst=51)
    assert GatewaySettings().capability_limit("other") is None
    assert GatewaySettings().nonce_ttl == 360


def test_capability_limits_parse_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("REACH_GATEWAY_CAPABILITY_LIMITS", '{"search.web": [5, 10]}')
    monkeypatch.setenv("REACH_GATEWAY_SECRETS_KEY", "hunter2-value")
    settings = GatewaySettings()
    assert settings.capability_limit("search.web") == Limit(rate=5.0, burst=10)
    assert "hunter2" not in repr(settings)
    monkeypatch.setenv("REACH_GATEWAY_CAPABILITY_LIMITS", '{"search.web": [0, 10]}')
    with pytest.raises(ValueError, match="rate > 0, burst >= 1"):
        GatewaySettings()


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_redis_unreachable_is_infra_unavailable() -> None:
    client = door_client(f"redis://127.0.0.1:{_closed_port()}/0", timeout_s=0.2)
    with pytest.raises(InfraUnavailable, match="claiming a request nonce"):
        run(RedisNonceStore(client=client, namespace="ns").claim("app_1", "n-0000001", 10))
    with pytest.raises(InfraUnavailable, match="taking a quota token.*503"):
        run(RedisQuotas(client=client, namespace="ns").take(APP, "search.web"))


def test_the_read_bucket_is_the_apps_own_and_apart_from_its_request_bucket() -> None:
    clock = Clock()
    quotas: Quotas = MemoryQuotas(clock=clock, read_limit=Limit(rate=2.0, burst=2))
    assert [run(quotas.take_read(APP)).allowed for _ in range(3)] == [True, True, False]
    refused = run(quotas.take_read(APP))
    assert (refused.allowed, refused.scope, refused.retry_after_s) == (False, "read", pytest.approx(0.5))
    assert run(quotas.take(APP, "search.web")).allowed  # the request bucket is untouched by reads
    clock.now += 0.5
    assert run(quotas.take_read(APP)).allowed


def test_a_released_nonce_is_forgotten() -> None:
    store = MemoryNonceStore(Clock())
    assert run(store.claim("a", "nonce-000001", 60)) and not run(store.claim("a", "nonce-000001", 60))
    run(store.release("a", "nonce-000001"))
    assert run(store.claim("a", "nonce-000001", 60))
