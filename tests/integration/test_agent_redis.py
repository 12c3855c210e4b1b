"""Redis is a cache of leases and results: the SDK degrades instead of stopping when it restarts or is flushed.

Every test here runs its own redis-server (reach/tooling/faults/redis.py), never the shared one."""

from __future__ import annotations

import asyncio
import threading
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis

from reach.agent import Agent, Context
from reach.client import Client
from reach.envelopes import now_ms
from reach.errors import InfraUnavailable
from reach.names import Names
from reach.records import Envelope, Receipt, Status
from reach.registry import read_registry
from reach.settings import KafkaSettings
from reach.tooling.faults.redis import RedisServer
from tests.integration.agent_support import Receipts, inbox_partitions, running, wait_for, with_starts
from tests.integration.stream_app import StreamApp

AGENT = "agent://test/cache"


@pytest.fixture
def private_redis(namespace: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[RedisServer]:
    server = RedisServer(tmp_path / "redis").start()
    monkeypatch.setenv("REACH_REDIS_URL", server.url)
    yield server
    server.stop()


def _agent(runs: Counter[str], gate: threading.Event, **kwargs: Any) -> Agent:
    agent = Agent(AGENT, ttl_ms=3000, max_concurrency=4, lease_margin_ms=500, drain_grace_s=10,
                  execution_timeout_ms=3000, **kwargs)

    @agent.capability("test.cache", version="1.0.0", input_schema={"type": "object"})
    def handle(payload: dict[str, Any], ctx: Context) -> dict[str, Any]:
        runs[ctx.envelope.message_id] += 1
        if payload.get("wait"):
            gate.wait(20)
        return {"n": payload.get("n")}

    return agent


def _ready(names: Names, agent: Agent) -> bool:
    try:
        live = read_registry(KafkaSettings(), names).live(now_ms())
    except InfraUnavailable:  # a just-created topic may not be in the metadata yet
        return False
    return any(r.instance_id == agent.instance_id and r.assigned_partitions for r in live)


def _keys(server: RedisServer, pattern: str) -> list[bytes]:
    try:
        with redis.Redis.from_url(server.url, socket_timeout=1) as client:
            return list(client.keys(pattern))
    except (redis.RedisError, OSError):
        return []


def test_redis_restart_falls_back_to_the_status_table_and_comes_back(
        namespace: str, stream_app: StreamApp, private_redis: RedisServer) -> None:
    names, runs, gate = Names(namespace), Counter[str](), threading.Event()
    # no record of its own runs: it answers as an instance that did not run the message would (the status table)
    agent = _agent(runs, gate, recent_runs=0)
    with running(agent) as thread, Client() as client:
        wait_for(lambda: _ready(names, agent), 60, "READY")
        receipts = Receipts(names.receipts)
        inbox = names.inbox(AGENT)
        first = client.envelope("test.cache", {"n": 1})
        client.publish(first, topic=inbox, partition=0)
        receipts.wait_status([first.message_id], Status.COMPLETED)
        wait_for(lambda: stream_app.get(f"/messages/{first.message_id}").get("status") == "COMPLETED", 30,
                 "the COMPLETED row")

        private_redis.stop()
        client.publish(first, topic=inbox, partition=0)  # a redelivery while Redis is down
        fresh = client.envelope("test.cache", {"n": 2})
        client.publish(fresh, topic=inbox, partition=1)
        receipts.wait_status([fresh.message_id], Status.COMPLETED)
        seen = wait_for(lambda: (lambda s: s if any(r.timings.get("status_hit") for r in s.get(first.message_id, []))
                                 else None)(receipts.by_message()), 30, "the redelivery answered from the status table")
        hit = next(r for r in seen[first.message_id] if r.timings.get("status_hit"))
        assert hit.status is Status.COMPLETED and hit.result == b'{"n":1}', "the row's result is republished"
        assert runs[first.message_id] == 1, "the COMPLETED message did not run again"
        assert runs[fresh.message_id] == 1, "with Redis down the new message still ran (at least once)"

        private_redis.start()  # same port, empty
        sent: list[Envelope] = []

        def cached_again() -> bool:
            env = client.envelope("test.cache", {"n": 100 + len(sent)})
            client.publish(env, topic=inbox, partition=0)
            sent.append(env)
            return bool(_keys(private_redis, f"{namespace}:result:*"))

        wait_for(cached_again, 60, "results cached in Redis again after its restart", interval=0.5)
        receipts.wait_status([e.message_id for e in sent], Status.COMPLETED)
        assert thread.is_alive()
    assert all(runs[e.message_id] == 1 for e in sent)


def _completed_twice(receipts: Receipts, message_id: str) -> list[Receipt]:
    """The two COMPLETED receipts of a message delivered twice (waited for)."""
    def both() -> list[Receipt] | None:
        done = [r for r in receipts.by_message().get(message_id, []) if r.status is Status.COMPLETED]
        return done if len(done) == 2 else None

    return wait_for(both, 30, f"two COMPLETED receipts of {message_id}")


def test_with_redis_down_a_redelivery_to_the_instance_that_ran_it_runs_nothing_again(
        namespace: str, private_redis: RedisServer) -> None:
    """The fault suite's leader-sigkill repeats (docs/reliability.md): Redis unreachable while envelopes this
    instance finished, or is still running, are delivered again. No status table runs here: the instance's own
    record of runs answers (reach.agent.recentruns)."""
    names, runs, gate = Names(namespace), Counter[str](), threading.Event()
    agent = _agent(runs, gate)
    with running(agent) as thread, Client() as client:
        wait_for(lambda: _ready(names, agent), 60, "READY")
        receipts = Receipts(names.receipts)
        inbox = names.inbox(AGENT)
        done = client.envelope("test.cache", {"n": 1})
        client.publish(done, topic=inbox, partition=0)
        receipts.wait_status([done.message_id], Status.COMPLETED)
        slow = client.envelope("test.cache", {"wait": True, "n": 2})
        client.publish(slow, topic=inbox, partition=1)
        receipts.wait_status([slow.message_id], Status.STARTED)

        private_redis.stop()
        client.publish(done, topic=inbox, partition=0)  # redeliveries while Redis is unreachable
        client.publish(slow, topic=inbox, partition=1)  # of a run still in flight on this instance
        first, again = _completed_twice(receipts, done.message_id)
        assert again == first, "its recorded terminal receipt, byte for byte (no status_hit: no status table)"
        gate.set()
        _completed_twice(receipts, slow.message_id)  # the running message's outcome, for both deliveries
        started = [r for r in receipts.by_message()[slow.message_id] if r.status is Status.STARTED]
        assert len(started) == 1, "one run, waited for"
        assert runs == Counter({done.message_id: 1, slow.message_id: 1}), "no handler ran twice"
        assert thread.is_alive()


def test_a_flush_mid_run_keeps_the_lease_and_loses_no_message(namespace: str, private_redis: RedisServer) -> None:
    names, runs, gate = Names(namespace), Counter[str](), threading.Event()
    agent = _agent(runs, gate)
    with running(agent) as thread, Client() as client:
        wait_for(lambda: _ready(names, agent), 60, "READY")
        receipts = Receipts(names.receipts)
        inbox = names.inbox(AGENT)
        slow = client.envelope("test.cache", {"wait": True, "n": 0})
        client.publish(slow, topic=inbox, partition=1)
        receipts.wait_status([slow.message_id], Status.STARTED)
        lease = f"{namespace}:lease:{{{slow.message_id}}}:0"
        assert _keys(private_redis, lease) == [lease.encode()]
        private_redis.flush()
        # the renewer re-takes the vanished lease while the handler still runs
        wait_for(lambda: _keys(private_redis, lease), 20, "the lease re-taken after the flush")
        quick = [client.envelope("test.cache", {"n": i}) for i in range(1, 11)]
        for i, env in enumerate(quick):
            client.publish(env, topic=inbox, partition=i % inbox_partitions(AGENT))
        gate.set()
        seen = receipts.wait_status([slow.message_id, *(e.message_id for e in quick)], Status.COMPLETED)
        assert thread.is_alive()
    for env in [slow, *quick]:
        assert with_starts(seen[env.message_id]) == [Status.STARTED, Status.COMPLETED]
        assert runs[env.message_id] == 1


def test_leases_claim_in_one_call_and_survive_a_restart_of_redis(tmp_path: Path) -> None:
    from redis.asyncio import Redis

    from reach.agent.idempotency import Leases
    from reach.failures import Outgoing

    async def scenario(server: RedisServer) -> None:
        client = Redis.from_url(server.url)
        a = Leases(client, namespace="n", owner="a", result_ttl_s=60)
        b = Leases(client, namespace="n", owner="b", result_ttl_s=60)
        claims = await asyncio.gather(*(a.claim(f"m{i}", 0, 1, 5_000) for i in range(20)))  # one pipeline
        assert all(c.ours for c in claims)
        assert (await b.claim("m0", 0, 1, 5_000)).holder == "a"
        await a.finish("m0", 0, b"the receipt")
        assert (await b.claim("m0", 0, 1, 5_000)).result == b"the receipt"
        records = (Outgoing("n.retry.1s", "m1", b"next", [("x-reach-due-at", b"9")]),)
        await a.store_retry("m1", 0, 1, records)
        assert (await b.claim("m1", 0, 1, 5_000)).retry == records
        assert (await b.claim("m1", 0, 2, 5_000)).holder == "a", "attempt 2 has no cached retry; a holds the lease"
        await client.aclose()
        server.restart()  # empty, and its script cache is gone too
        client = Redis.from_url(server.url)
        a = Leases(client, namespace="n", owner="a", result_ttl_s=60)
        b = Leases(client, namespace="n", owner="b", result_ttl_s=60)
        assert (await b.claim("m2", 0, 1, 5_000)).ours, "scripts loaded again (NOSCRIPT handled)"
        assert await a.renew("m3", 0, 5_000), "a vanished lease is taken again by its owner"
        assert not await b.renew("m3", 0, 5_000)
        await client.aclose()

    with RedisServer(tmp_path / "redis") as server:
        asyncio.run(scenario(server))
