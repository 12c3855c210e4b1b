"""Delay tiers on the real broker: nothing leaves before it is due, a held partition blocks no other,
and an undecodable record is dead-lettered without stopping the tier."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest
from confluent_kafka import Producer, TopicPartition

from reach import dlq
from reach.envelopes import new_envelope, now_ms
from reach.kafka import clients, codec, headers, topics
from reach.kafka.topicreader import open_reader
from reach.names import Names
from reach.records import DeadLetter, Envelope
from reach.settings import KafkaSettings, RedisSettings
from reach.streams.delays.forwarder import DelayForwarder


@pytest.fixture
def forwarder(namespace: str) -> Iterator[DelayForwarder]:
    fwd = DelayForwarder(names=Names(namespace), tiers=["1s", "10s", "60s"], kafka=KafkaSettings(),
                         redis=RedisSettings())
    fwd.start()
    yield fwd
    fwd.stop(timeout=15)


def put(producer: Producer, topic: str, partition: int, env: Envelope | None, due: int | None,
        raw: bytes | None = None) -> None:
    hdrs = [(headers.DUE_AT, str(due).encode())] if due is not None else []
    producer.produce(topic, raw if raw is not None else codec.encode(env), partition=partition, headers=hdrs,
                     key=b"k")


def collect(topic: str, want: int, timeout: float = 30) -> list[tuple[Envelope, int]]:
    reader = open_reader("test", KafkaSettings())
    deadline = time.monotonic() + timeout
    partitions: list[int] = []
    while not partitions and time.monotonic() < deadline:  # a topic created a moment ago may have no leader yet
        meta = reader.list_topics(topic, timeout=10).topics.get(topic)
        partitions = sorted(meta.partitions) if meta is not None and meta.error is None else []
        if not partitions:
            time.sleep(0.2)
    reader.assign([TopicPartition(topic, p, 0) for p in partitions])
    got: list[tuple[Envelope, int]] = []
    while len(got) < want and time.monotonic() < deadline:
        for msg in reader.consume(100, 0.5):
            if not msg.error():
                got.append((codec.decode(msg.value() or b"", Envelope), msg.timestamp()[1]))
    reader.close()
    return got


def test_records_leave_when_due_and_a_held_partition_blocks_no_other(namespace: str,
                                                                     forwarder: DelayForwarder) -> None:
    names = Names(namespace)
    cap = names.capability("demo.echo")
    admin = clients.admin(KafkaSettings())
    topics.ensure_topic(admin, cap, topics.TopicSpec(partitions=1, replication_factor=1))
    producer = clients.producer(KafkaSettings())
    base = now_ms()
    late = new_envelope("demo.echo", {"n": "late"})
    behind = new_envelope("demo.echo", {"n": "behind"})
    other = new_envelope("demo.echo", {"n": "other"})
    tier = names.retry("1s")
    put(producer, tier, 0, late, base + 1_500)
    put(producer, tier, 0, behind, base + 100)   # waits behind the later-due head of partition 0
    put(producer, tier, 1, other, base + 100)    # partition 1 is not held up by partition 0
    producer.flush(10)

    got = {env.message_id: ts for env, ts in collect(cap, 3)}
    assert set(got) == {late.message_id, behind.message_id, other.message_id}
    assert got[late.message_id] >= base + 1_500, "never forwarded before it is due"
    assert got[behind.message_id] >= got[late.message_id], "order within a tier partition holds"
    assert got[other.message_id] < got[late.message_id], "another partition moves while one is held"


def test_an_undecodable_record_is_dead_lettered_and_the_tier_moves_on(namespace: str,
                                                                     forwarder: DelayForwarder) -> None:
    names = Names(namespace)
    producer = clients.producer(KafkaSettings())
    good = new_envelope("demo.echo", {"n": 1})
    topics.ensure_topic(clients.admin(KafkaSettings()), names.capability("demo.echo"), topics.TopicSpec(partitions=1))
    put(producer, names.retry("10s"), 0, None, None, raw=b"\x00poison")
    put(producer, names.retry("10s"), 0, good, now_ms())
    producer.flush(10)

    assert [env.message_id for env, _ in collect(names.capability("demo.echo"), 1)] == [good.message_id]
    reader = open_reader("test-dlq", KafkaSettings())
    reader.assign([TopicPartition(names.dlq, p, 0) for p in (0, 1)])
    letters: list[DeadLetter] = []
    deadline = time.monotonic() + 20
    while not letters and time.monotonic() < deadline:
        letters += [codec.decode(m.value() or b"", DeadLetter) for m in reader.consume(10, 0.5) if not m.error()]
    reader.close()
    assert letters and letters[0].reason == dlq.UNDECODABLE and letters[0].envelope == b"\x00poison"
    assert letters[0].origin_topic == names.retry("10s")
