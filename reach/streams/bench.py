"""Routing throughput: pre-produce N envelopes in a fresh namespace, route them, print msg/s.

`python -m reach.streams.bench [N]` (needs REACH_BOOTSTRAP or a local broker). Four simulated
READY instances are registered; nothing consumes their inboxes.
"""

from __future__ import annotations

import sys
import time
import uuid
from pathlib import Path

from confluent_kafka import Producer

from reach import clients, codec, topics
from reach.envelopes import new_envelope, now_ms
from reach.names import Names
from reach.records import AgentRegistration, AgentState, Capability
from reach.settings import KafkaSettings, ReachSettings
from reach.streams.router import Router


def run(n: int, topics_file: Path = Path("topics.yaml")) -> float:
    """Route `n` envelopes in a throwaway namespace; returns msg/s (group join included)."""
    ns = "bench" + uuid.uuid4().hex[:8]
    names = Names(ns)
    kafka = KafkaSettings()
    spec = topics.load(topics_file)
    admin = clients.admin(kafka)
    topics.apply(admin, topics.plan(admin, spec.resolved(names)))
    inbox = names.inbox("agent://bench/echo")
    topics.ensure_topic(admin, inbox, spec.family("agent"))
    topics.ensure_topic(admin, names.capability("bench.echo"), spec.family("cap"))
    producer = Producer(kafka.producer())
    for i in range(4):
        reg = AgentRegistration(
            agent_id="agent://bench/echo", instance_id=f"bench-{i}", build_version="bench",
            capabilities=[Capability(name="bench.echo", version="1.0.0")], region="eu" if i % 2 else "us",
            max_concurrency=10**9, state=AgentState.READY, heartbeat_at=now_ms(), ttl_ms=600_000,
            assigned_partitions=[2 * i, 2 * i + 1], inbox_topic=inbox,
        )
        producer.produce(names.registry, key=reg.instance_id.encode(), value=codec.encode(reg))
    template = new_envelope("bench.echo", {"text": "x" * 200})
    for i in range(n):
        env = template.model_copy(update={"message_id": f"m{i:010d}"})
        producer.produce(names.capability("bench.echo"), key=env.message_id.encode(), value=codec.encode(env))
        if i % 10_000 == 0:
            producer.flush(30)
    producer.flush(30)
    router = Router(kafka=kafka, reach=ReachSettings(namespace=ns))
    started = time.monotonic()
    router.start()
    try:
        while router.stats.snapshot().totals["routed"] < n and router.healthy():
            time.sleep(0.05)
        return n / (time.monotonic() - started)
    finally:
        router.stop()


def main() -> None:
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 50_000
    print(f"routed {n} envelopes at {run(n):,.0f} msg/s (including consumer group join)")


if __name__ == "__main__":
    main()
