"""The in-memory bus (reach.kafka.memory) behaves like the broker where Reach relies on it: per-partition order,
murmur2 placement, delivery reports, group rebalances and committed offsets; clients.py builds it for memory://."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from confluent_kafka import OFFSET_BEGINNING, OFFSET_INVALID, KafkaError, TopicPartition

from reach.kafka import clients, memory
from reach.settings import KafkaSettings
from reach.streams.status.lookup import partition_of


@pytest.fixture
def kafka() -> Iterator[KafkaSettings]:
    name = f"unit-{uuid.uuid4().hex[:8]}"
    yield KafkaSettings(bootstrap=memory.SCHEME + name)
    memory.forget(name)


def _topic(kafka: KafkaSettings, name: str, partitions: int) -> None:
    memory.bus(memory.bus_name(kafka.admin()) or "").create_topic(name, partitions)


def _reports(kafka: KafkaSettings, records: list[tuple[str, bytes | None, bytes]]) -> list[tuple[Any, Any]]:
    producer = clients.producer(kafka)
    reports: list[tuple[Any, Any]] = []
    for topic, key, value in records:
        producer.produce(topic, value=value, key=key, on_delivery=lambda err, msg: reports.append((err, msg)))
    assert reports == [], "reports are served by poll or flush, not inside produce"
    assert producer.flush(1) == 0
    return reports


def test_the_factory_builds_memory_clients_for_a_memory_bootstrap(kafka: KafkaSettings) -> None:
    assert isinstance(clients.admin(kafka), memory.MemoryAdmin)
    assert isinstance(clients.producer(kafka), memory.MemoryProducer)
    assert isinstance(clients.consumer("g", kafka), memory.MemoryConsumer)
    assert clients.in_memory(kafka) and not clients.in_memory(KafkaSettings(bootstrap="localhost:9092"))


def test_records_keep_their_order_per_partition_and_land_where_murmur2_puts_their_key(kafka: KafkaSettings) -> None:
    _topic(kafka, "t", 4)
    reports = _reports(kafka, [("t", f"m{i % 3}".encode(), str(i).encode()) for i in range(30)])
    assert all(err is None for err, _ in reports)
    for _, msg in reports:
        assert msg.partition() == partition_of(msg.key().decode(), 4), "where the status lookup looks"
    reader = clients.consumer("reader", kafka)
    reader.assign([TopicPartition("t", p, OFFSET_BEGINNING) for p in range(4)])
    seen = reader.consume(100, 1.0)
    assert len(seen) == 30
    for key in (b"m0", b"m1", b"m2"):
        values = [int(m.value()) for m in seen if m.key() == key]
        assert values == sorted(values), "one key, one partition, in order"
    offsets = [(m.partition(), m.offset()) for m in seen]
    assert {(err, msg.partition(), msg.offset()) for err, msg in reports} == {(None, p, o) for p, o in offsets}


def test_a_record_for_a_missing_topic_gets_an_error_report(kafka: KafkaSettings) -> None:
    [(err, msg)] = _reports(kafka, [("nowhere", b"k", b"v")])
    assert err.code() == KafkaError.UNKNOWN_TOPIC_OR_PART and msg.topic() == "nowhere"
    meta = clients.admin(kafka).list_topics("nowhere").topics["nowhere"]
    assert meta.error.code() == KafkaError.UNKNOWN_TOPIC_OR_PART and not meta.partitions


def test_a_second_member_takes_half_of_the_partitions_and_reads_from_the_committed_offsets(
        kafka: KafkaSettings) -> None:
    _topic(kafka, "jobs", 4)
    _reports(kafka, [("jobs", None, b"x") for _ in range(20)])
    events: list[tuple[str, str, list[int]]] = []

    def member(name: str) -> Any:
        consumer = clients.consumer("workers", kafka)
        consumer.subscribe(["^jo.*"],
                           on_assign=lambda _c, tps: events.append((name, "assign", [tp.partition for tp in tps])),
                           on_revoke=lambda _c, tps: events.append((name, "revoke", [tp.partition for tp in tps])))
        return consumer

    first = member("first")
    read = first.consume(5, 1.0)
    assert events == [("first", "assign", [0, 1, 2, 3])]
    first.commit(message=read[-1], asynchronous=False)
    tp = TopicPartition("jobs", read[-1].partition())
    assert first.committed([tp])[0].offset == read[-1].offset() + 1
    assert first.position([tp])[0].offset == read[-1].offset() + 1

    second = member("second")
    second.poll(0)
    assert second.assignment() == [], "as the broker's join barrier: nothing before the old owner revoked it"
    first.poll(0)
    second.poll(0)
    mine = {tp.partition for tp in first.assignment()}
    theirs = {tp.partition for tp in second.assignment()}
    assert mine | theirs == {0, 1, 2, 3} and not mine & theirs and len(mine) == len(theirs) == 2
    assert ("first", "revoke", [0, 1, 2, 3]) in events, "eager: everything revoked, then reassigned"
    described = clients.admin(kafka).describe_consumer_groups(["workers"])["workers"].result()
    assert len(described.members) == 2

    second.close()
    first.poll(0)
    assert {tp.partition for tp in first.assignment()} == {0, 1, 2, 3}, "the leaver's partitions come back"


def test_an_asynchronous_commit_is_answered_through_on_commit_inside_poll(kafka: KafkaSettings) -> None:
    _topic(kafka, "t", 1)
    answers: list[tuple[Any, list[TopicPartition]]] = []
    consumer = clients.consumer("g", kafka, on_commit=lambda err, tps: answers.append((err, tps)))
    consumer.assign([TopicPartition("t", 0, OFFSET_BEGINNING)])
    assert consumer.committed([TopicPartition("t", 0)])[0].offset == OFFSET_INVALID
    assert consumer.commit(offsets=[TopicPartition("t", 0, 7)], asynchronous=True) is None
    assert answers == []
    consumer.poll(0)
    [(err, [tp])] = answers
    assert err is None and (tp.topic, tp.partition, tp.offset) == ("t", 0, 7)
    assert consumer.committed([TopicPartition("t", 0)])[0].offset == 7


def test_a_paused_partition_is_not_read_until_resumed(kafka: KafkaSettings) -> None:
    _topic(kafka, "t", 2)
    producer = clients.producer(kafka)
    for p in (0, 1):
        producer.produce("t", value=b"v", partition=p)
    reader = clients.consumer("r", kafka)
    reader.assign([TopicPartition("t", p, OFFSET_BEGINNING) for p in (0, 1)])
    reader.pause([TopicPartition("t", 0)])
    assert [m.partition() for m in reader.consume(10, 0.1)] == [1]
    reader.resume([TopicPartition("t", 0)])
    assert [m.partition() for m in reader.consume(10, 0.1)] == [0]
    assert reader.get_watermark_offsets(TopicPartition("t", 0)) == (0, 1)


def test_a_cooperative_member_gives_up_only_what_moves_and_a_new_matching_topic_is_assigned(
        kafka: KafkaSettings) -> None:
    _topic(kafka, "inbox.a", 2)
    revoked: list[list[tuple[str, int]]] = []

    def member() -> Any:
        consumer = clients.consumer("agents", kafka, **{"partition.assignment.strategy": "cooperative-sticky"})
        consumer.subscribe(["^inbox\\..*"], on_assign=lambda c, tps: c.incremental_assign(tps),
                           on_revoke=lambda c, tps: (revoked.append([(tp.topic, tp.partition) for tp in tps]),
                                                     c.incremental_unassign(tps)))
        consumer.poll(0)
        return consumer

    first = member()
    assert len(first.assignment()) == 2
    second = member()
    first.poll(0)
    second.poll(0)  # the moving partition is assigned once its old owner revoked it (the second rebalance)
    assert revoked == [[("inbox.a", 1)]], "only the partition that moves is revoked"
    assert [tp.partition for tp in first.assignment()] == [0]
    assert [tp.partition for tp in second.assignment()] == [1]
    _topic(kafka, "inbox.b", 2)
    first.poll(0)
    second.poll(0)
    owned = [(tp.topic, tp.partition) for c in (first, second) for tp in c.assignment()]
    assert sorted(owned) == [("inbox.a", 0), ("inbox.a", 1), ("inbox.b", 0), ("inbox.b", 1)]
