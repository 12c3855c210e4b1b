"""Business idempotency and cost on the real broker, Redis and router: the same idempotency_key twice charges
once (the billing agent's Redis counter) and the second's COMPLETED receipt names the first in reused_from;
another tenant's same key charges again; a handler-reported cost shows in `reach receipts sql` over cost.sql."""

from __future__ import annotations

import json

import redis

from examples import billing_agent
from reach.client import Client
from reach.names import Names
from reach.records import Status
from reach.settings import RedisSettings
from tests.integration.agent_support import ROOT, Receipts, reach_cli, running
from tests.integration.stream_app import StreamApp


def _runs(order: str) -> int:
    value = redis.Redis.from_url(RedisSettings().url()).get(billing_agent.runs_key(order))
    return int(value or 0)


def _completed(receipts: Receipts, message_id: str) -> list:  # type: ignore[type-arg]
    return [r for r in receipts.wait_status([message_id], Status.COMPLETED, timeout=60)[message_id]
            if r.status is Status.COMPLETED]


def test_the_same_key_twice_charges_once_and_the_second_is_reused(namespace: str, stream_app: StreamApp) -> None:
    names = Names(namespace)
    receipts = Receipts(names.receipts)
    order = {"order": "o-42", "amount": 12.5}
    with running(billing_agent.agent), Client() as client:
        first = client.send("demo.charge", order, idempotency_key="charge:o-42")
        [ran] = _completed(receipts, first)
        second = client.send("demo.charge", order, idempotency_key="charge:o-42")
        [reused] = _completed(receipts, second)
        # both at once: the later one waits for the earlier and reuses it (one more charge in all, not two)
        together = [client.send("demo.charge", {"order": "o-43", "amount": 1.0}, idempotency_key="charge:o-43")
                    for _ in range(2)]
        ends = [_completed(receipts, m)[0] for m in together]
        other_tenant = client.send("demo.charge", order, idempotency_key="charge:o-42", tenant="acme")
        [elsewhere] = _completed(receipts, other_tenant)
        by_cli = reach_cli("send", "demo.charge", "--payload", json.dumps(order), "--idempotency-key",
                           "charge:o-42", "--wait", "--json")
    assert ran.reused_from is None and reused.reused_from == first
    assert reused.result == ran.result and json.loads(ran.result or b"{}")["charge_number"] == 1
    assert sorted(e.reused_from is None for e in ends) == [False, True]
    assert _runs("o-43") == 1
    assert elsewhere.reused_from is None, "one tenant never sees another's result"
    assert _runs("o-42") == 2, "o-42 charged once for tenant default, once for acme"
    assert ran.cost == 0.125 and reused.cost is None, "a reused result costs nothing"
    assert by_cli.returncode == 0, by_cli.stderr
    shown = json.loads(by_cli.stdout)
    assert shown["status"] == "COMPLETED" and shown["result"]["charge_number"] == 1
    assert _runs("o-42") == 2, "`reach send --idempotency-key` reused the first charge too"


def test_a_reported_cost_shows_in_cost_sql(namespace: str, stream_app: StreamApp) -> None:
    names = Names(namespace)
    receipts = Receipts(names.receipts)
    with running(billing_agent.agent), Client() as client:
        ids = [client.send("demo.charge", {"order": f"c-{i}", "amount": amount})
               for i, amount in enumerate((10.0, 27.0))]
        for message_id in ids:
            _completed(receipts, message_id)
    out = reach_cli("receipts", "sql", "--file", str(ROOT / "docs/queries/cost.sql"), "--format", "json")
    assert out.returncode == 0, out.stderr
    [row] = [r for r in json.loads(out.stdout) if r["capability"] == "demo.charge"]
    assert row["agent_id"] == "agent://demo/billing" and row["completed"] == 2
    assert row["total_cost"] == 0.37 and row["cost_per_completed"] == 0.185


def test_the_lua_scripts_on_real_redis_reuse_only_completed_and_scope_by_tenant(namespace: str) -> None:
    """The claim and finish scripts against the real Redis: a running key is held, a FAILED ending frees it, a
    COMPLETED one is reused for the same tenant and capability only (also when another ending won the message's
    register), and a message's own key is not held."""
    import asyncio

    from redis.asyncio import Redis

    from reach.agent.idempotency import KeyScope, Leases

    async def go() -> None:
        redis_ = Redis.from_url(RedisSettings().url())
        a = Leases(redis_, namespace=namespace, owner="i-a", result_ttl_s=60)
        b = Leases(redis_, namespace=namespace, owner="i-b", result_ttl_s=60)
        key = KeyScope(tenant="t1", capability="demo.charge", key="k-1", window_ms=60_000, hold_ms=30_000)
        assert (await a.claim("m-1", 0, 1, 5_000, key)).ours
        await a.release("m-1", 0)  # attempt 1 failed and its retry was scheduled: the key stays m-1's
        assert (await b.claim("m-2", 0, 1, 5_000, key)).key_holder == "m-1"
        assert (await a.claim("m-1", 0, 2, 5_000, key)).ours, "the same message's next attempt is not blocked"
        assert (await b.claim("m-2", 0, 1, 5_000, key)).key_holder == "m-1"
        await a.finish("m-1", 0, b"failed-receipt", scope=key, completed=False)
        assert (await b.claim("m-2", 0, 1, 5_000, key)).ours, "a failed first frees the key"
        await b.finish("m-2", 0, b"completed-receipt", scope=key, completed=True)
        assert (await a.claim("m-3", 0, 1, 5_000, key)).reused == b"completed-receipt"
        other = KeyScope(tenant="t2", capability="demo.charge", key="k-1")
        assert (await a.claim("m-4", 0, 1, 5_000, other)).ours, "another tenant's key is its own"
        elsewhere = KeyScope(tenant="t1", capability="demo.other", key="k-1")
        assert (await a.claim("m-5", 0, 1, 5_000, elsewhere)).ours, "another capability's key is its own"
        window = await redis_.pttl(a.key_keys(key)[1])
        assert 0 < window <= 60_000, "the COMPLETED result is kept for the window"
        lost = KeyScope(tenant="t1", capability="demo.charge", key="k-2", window_ms=60_000, hold_ms=30_000)
        assert (await a.claim("m-6", 0, 1, 5_000, lost)).ours
        await redis_.set(a.result_key("m-6", 0), b"expired-by-timekeeper")  # its EXPIRED won the register
        assert await a.finish("m-6", 0, b"completed-6", scope=lost, completed=True) == b"expired-by-timekeeper"
        assert (await b.claim("m-7", 0, 1, 5_000, lost)).reused == b"completed-6", \
            "a COMPLETED run that lost the register still answers its key: the side effect happened"
        await a.finish("m-6", 0, b"completed-6-again", scope=lost, completed=True)
        assert (await b.claim("m-8", 0, 1, 5_000, lost)).reused == b"completed-6", "a result there is kept"
        await redis_.aclose()

    asyncio.run(go())
