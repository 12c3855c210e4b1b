"""Idempotency that survives Redis (issue 25 item 4) on the real broker, router and a private Redis: a request with
an idempotency key completes; Redis is stopped, its data directory removed and started again (empty); the same
key sent again reuses the first result from the key ledger on Kafka and the handler's side effect stays at 1.

The router, the status table and the agent all use the private redis-server (reach/tooling/faults/redis.py),
never the shared one."""

from __future__ import annotations

import shutil
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from reach.agent import Agent, Context
from reach.client import Client
from reach.envelopes import now_ms
from reach.errors import InfraUnavailable
from reach.names import Names
from reach.records import Status
from reach.registry import read_registry
from reach.settings import KafkaSettings
from reach.tooling.faults.redis import RedisServer
from tests.integration.agent_support import Receipts, TopicReader, running, starts, wait_for
from tests.integration.stream_app import StreamApp
from tests.integration.test_agent_redis import _keys

pytestmark = pytest.mark.integration
AGENT = "agent://test/durable"


@pytest.fixture
def private_redis(namespace: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[RedisServer]:
    server = RedisServer(tmp_path / "redis").start()
    monkeypatch.setenv("REACH_REDIS_URL", server.url)  # before stream_app: the router uses it too
    yield server
    server.stop()


def _agent(charges: Counter[str]) -> Agent:
    agent = Agent(AGENT, ttl_ms=3000, max_concurrency=4, lease_margin_ms=500, drain_grace_s=10)

    @agent.capability("test.durable", version="1.0.0", input_schema={"type": "object"})
    def charge(payload: dict[str, Any], ctx: Context) -> dict[str, Any]:
        charges[payload["order"]] += 1  # the side effect
        return {"order": payload["order"], "charge_number": charges[payload["order"]]}

    return agent


def _ready(names: Names, agent: Agent) -> bool:
    try:
        live = read_registry(KafkaSettings(), names).live(now_ms())
    except InfraUnavailable:
        return False
    return any(r.instance_id == agent.instance_id and r.assigned_partitions for r in live)


def test_a_key_completed_before_redis_came_back_empty_is_reused_not_run_again(
        namespace: str, private_redis: RedisServer, stream_app: StreamApp) -> None:
    names, charges = Names(namespace), Counter[str]()
    agent = _agent(charges)
    order = {"order": "o-1", "amount": 3}
    with running(agent), Client() as client:
        wait_for(lambda: _ready(names, agent), 60, "READY")
        receipts = Receipts(names.receipts)
        first = client.send("test.durable", order, idempotency_key="charge:o-1")
        ran = next(r for r in receipts.wait_status([first], Status.COMPLETED, timeout=60)[first]
                   if r.status is Status.COMPLETED)
        unkeyed = client.send("test.durable", {"order": "o-2"})
        receipts.wait_status([unkeyed], Status.COMPLETED, timeout=60)

        private_redis.stop()
        shutil.rmtree(private_redis.workdir)  # its data directory gone: it comes back empty
        private_redis.start()
        # unkeyed messages first, until the agent caches in Redis again: it met the restarted Redis (its old
        # connections fail once, it backs off, reads the memory mark again), so the keyed one below is claimed
        # "ours" by an empty Redis, not skipped as an outage (that path asks the ledger too)
        unkeyed: list[str] = []

        def caching_again() -> bool:
            unkeyed.append(client.send("test.durable", {"order": f"o-{3 + len(unkeyed)}"}))
            receipts.wait_status(unkeyed[-1:], Status.COMPLETED, timeout=30)
            return bool(_keys(private_redis, f"{namespace}:result:*"))

        wait_for(caching_again, 30, "the agent using the restarted Redis", interval=0.2)

        second = client.send("test.durable", order, idempotency_key="charge:o-1")
        seen = receipts.wait_status([second], Status.COMPLETED, timeout=60)
        [reused] = [r for r in seen[second] if r.status is Status.COMPLETED]
        ledger = TopicReader(names.idempotency)
        records = wait_for(lambda: ledger.poll(), 10, "the key ledger's record")
    assert charges["o-1"] == 1, "the handler's side effect ran once"
    assert reused.reused_from == first and reused.result == ran.result
    assert not starts(seen[second]), "the second never started a run"
    assert len(records) == 1, "one ledger record per keyed COMPLETED request, none for the unkeyed or the reuse"
    assert all(charges[f"o-{n}"] == 1 for n in range(2, 3 + len(unkeyed)))
