"""Two instances share an inbox; SIGKILL one holding uncommitted work: nothing lost, nothing run twice."""

from __future__ import annotations

import json
import signal
import subprocess

import redis

from reach.client import Client
from reach.envelopes import now_ms
from reach.names import Names
from reach.records import Status
from reach.registry import read_registry
from reach.settings import KafkaSettings, RedisSettings
from tests.integration.agent_support import Receipts, inbox_partitions, spawn, wait_for

AGENT = "agent://test/slow"


def _two_ready(names: Names) -> list[tuple[str, list[int]]] | None:
    live = read_registry(KafkaSettings(), names).live(now_ms())
    owners = [(r.instance_id, r.assigned_partitions) for r in live if r.assigned_partitions]
    return owners if len(owners) == 2 and sum(len(p) for _, p in owners) == inbox_partitions(AGENT) else None


def test_sigkill_loses_nothing_and_runs_nothing_twice(namespace: str) -> None:
    names = Names(namespace)
    inbox = names.inbox(AGENT)
    r = redis.Redis.from_url(RedisSettings().url())
    procs: list[subprocess.Popen[bytes]] = [spawn("tests.integration.slow_agent:agent") for _ in range(2)]
    try:
        owners = wait_for(lambda: _two_ready(names), 60, "two READY instances splitting the inbox")
        (victim, victim_parts), (survivor, survivor_parts) = owners
        target = victim_parts[0]
        receipts = Receipts(names.receipts)
        with Client() as client:
            # On the victim's partition: a slow first message, then fast ones that complete but stay
            # uncommitted behind it (commits never skip an offset).
            slow = client.envelope("test.slow", {"slow": 10, "n": 0}, execution_timeout_ms=12_000)
            client.publish(slow, topic=inbox, partition=target)
            blocked = [client.envelope("test.slow", {"n": i}, execution_timeout_ms=3000) for i in range(1, 5)]
            for env in blocked:
                client.publish(env, topic=inbox, partition=target)
            elsewhere = [client.envelope("test.slow", {"n": 10 + i}, execution_timeout_ms=3000)
                         for i in range(4)]
            for i, env in enumerate(elsewhere):
                client.publish(env, topic=inbox, partition=survivor_parts[i % len(survivor_parts)])
            first = receipts.wait_status([e.message_id for e in blocked + elsewhere], Status.COMPLETED)
            assert all(first[e.message_id][-1].instance_id == victim for e in blocked)
            wait_for(lambda: receipts.by_message().get(slow.message_id), 20, "STARTED of the slow message")
        victim_proc = next(p for p in procs if victim.split("-")[-2] == str(p.pid))
        victim_proc.send_signal(signal.SIGKILL)
        victim_proc.wait(10)
        everyone = [slow, *blocked, *elsewhere]
        # The survivor takes the partition over (session timeout), waits out the dead lease, finishes all.
        seen = receipts.wait_status([e.message_id for e in everyone], Status.COMPLETED, timeout=90)
    finally:
        for p in procs:
            p.kill()
            p.wait(10)
    effects = {e.message_id: int(r.get(f"{namespace}:test:effects:{e.message_id}") or 0) for e in everyone}
    assert effects == {e.message_id: 1 for e in everyone}, "a side effect ran twice or never"
    # The slow message was started by the victim, killed mid-run, and completed by the survivor.
    assert int(r.get(f"{namespace}:test:runs:{slow.message_id}") or 0) == 2
    done_slow = [x for x in seen[slow.message_id] if x.status is Status.COMPLETED]
    assert [x.instance_id for x in done_slow] == [survivor]
    assert json.loads(done_slow[0].result or b"")["by"] == survivor
    # The fast ones the victim completed were redelivered to the survivor, which republished the cached
    # receipt instead of running them again.
    for env in blocked:
        completed = [x for x in seen[env.message_id] if x.status is Status.COMPLETED]
        assert completed[0].instance_id == victim
        assert any(x.timings.get("cache_hit") == 1 for x in completed[1:]), "redelivery should hit the cache"
