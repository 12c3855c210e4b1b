"""The demo: local infra, topics applied, envelopes round-tripping through a capability topic."""

from __future__ import annotations

import os
import time

from confluent_kafka import TopicPartition
from rich.console import Console
from rich.table import Table

from reach import clients, codec, topics
from reach.envelopes import new_envelope, routing_key
from reach.local import LocalInfra
from reach.names import Names
from reach.records import Envelope
from reach.settings import KafkaSettings, ReachSettings

console = Console()


def run_demo(duration: float | None) -> None:
    settings = ReachSettings()
    infra, started = LocalInfra(settings.home), False
    if not os.environ.get("REACH_BOOTSTRAP") and not infra.status().running:
        console.print("starting the local Kafka broker and Redis ...")
        infra.up()
        started = True
    try:
        _round_trip(settings, duration or 5.0)
    finally:
        if started:
            infra.down()
            console.print("stopped the local broker and Redis")


def _round_trip(settings: ReachSettings, duration: float) -> None:
    names = Names(settings.namespace)
    admin = clients.admin()
    spec = topics.load(settings.topics_file)
    applied = topics.apply(admin, topics.plan(admin, spec.resolved(names)))
    console.print(f"topics.yaml applied ({len(applied)} change(s))")
    topic = names.capability("demo.echo")
    topics.ensure_topic(admin, topic, spec.family("cap"))
    producer = clients.producer()
    sent: dict[str, Envelope] = {}
    end = time.monotonic() + duration
    while time.monotonic() < end:
        env = new_envelope("demo.echo", {"n": len(sent)}, session_key=f"s{len(sent) % 3}")
        sent[env.message_id] = env
        producer.produce(topic, codec.encode(env), key=routing_key(env))
        producer.poll(0)
        time.sleep(0.01)
    producer.flush(10)
    consumer = clients.consumer(f"{names.namespace}.demo-reader", kafka=KafkaSettings())
    meta = admin.list_topics(topic, timeout=10).topics[topic]
    consumer.assign([TopicPartition(topic, p, 0) for p in meta.partitions])
    seen: dict[int, int] = {}
    back = 0
    deadline = time.monotonic() + 20
    while back < len(sent) and time.monotonic() < deadline:
        for msg in consumer.consume(500, 1.0):
            value, partition = msg.value(), msg.partition()
            if msg.error() or value is None or partition is None:
                continue
            env = codec.decode(value, Envelope)
            if env.message_id in sent:
                back += 1
                seen[partition] = seen.get(partition, 0) + 1
    consumer.close()
    table = Table("partition", "envelopes", title=f"{topic}: {back}/{len(sent)} envelopes decoded back")
    for partition, count in sorted(seen.items()):
        table.add_row(str(partition), str(count))
    console.print(table)
