"""The health writer shell with in-memory fakes: ownership, restore, per-record isolation, publishing, revocation."""

from __future__ import annotations

import time
from typing import Any

import pytest
from confluent_kafka import TopicPartition

from reach.kafka import codec
from reach.names import Names
from reach.records import BreakerState, ErrorInfo, InstanceHealth, Receipt, Status
from reach.settings import KafkaSettings
from reach.streams.feed import RECEIPT, REGISTRATION, record_of
from reach.streams.health.writer import HealthWriter
from tests.unit.core.healthmodel.support import SHORT
from tests.unit.streams.kafka_fakes import FakeMessage, FakeProducer

NAMES = Names("hw")
OWNED, OTHER = "i-1", "i-4"  # murmur2 partitions 1 and 0 of 2


class Clock:
    def __init__(self) -> None:
        self.now = 100_000

    def __call__(self) -> int:
        return self.now


def writer(partition_records: dict[int, list[tuple[bytes | None, bytes | None]]] | None = None,
           published: list[tuple[str, InstanceHealth | None]] | None = None) -> tuple[HealthWriter, Clock]:
    clock = Clock()
    w = HealthWriter(names=NAMES, kafka=KafkaSettings(bootstrap="127.0.0.1:1"), settings=SHORT, clock=clock,
                     read_partition=lambda p: (partition_records or {}).get(p, []),
                     on_publish=lambda i, r: (published if published is not None else []).append((i, r)))
    w.partitions = 2
    return w, clock


def failed(instance: str, at: int, offset: int) -> FakeMessage:
    value = codec.encode(Receipt(message_id=f"m{offset}", trace_id="t", tenant="d", capability="demo.echo",
                                 agent_id="agent://demo/sick", instance_id=instance, status=Status.ATTEMPT_FAILED,
                                 at=at, error=ErrorInfo(kind="TRANSIENT", code="SICK", message="sick")))
    return FakeMessage(NAMES.receipts, offset % 4, offset, value)


def health_of(producer: FakeProducer) -> list[InstanceHealth]:
    return [codec.decode(v, InstanceHealth) for v in producer.to(NAMES.health)]


def test_folds_only_owned_instances_skips_a_bad_receipt_and_publishes_the_opened_breaker() -> None:
    w, clock = writer()
    w._assigned([1])
    assert w.owned == {1} and w.replaying
    batch = [failed(OWNED, clock.now + i, i) for i in range(10)] + [failed(OTHER, clock.now, 50)]
    batch.insert(3, FakeMessage(NAMES.receipts, 0, 99, b"not a receipt"))
    assert w.fold(batch) == 10
    assert w.bad_records == 1
    producer = FakeProducer()
    assert w.publish(producer) == []  # nothing while the replay fills the windows
    w.caught_up()
    clock.now += 20
    w.publish(producer)
    producer.flush()
    [record] = health_of(producer)
    assert (record.instance_id, record.breaker, record.admit, record.agent_id) == (
        OWNED, BreakerState.OPEN, 0.0, "agent://demo/sick")
    assert record.open_until == 100_009 + SHORT.open_ms
    assert record.consecutive_failures == 10 and record.success_1m == 0.0
    assert [k for _, _, k in producer.sent] == [OWNED.encode()]
    assert w.records()[OWNED] == record


def test_publishes_changes_at_once_and_numbers_at_most_every_interval() -> None:
    w, clock = writer()
    w._assigned([1])
    w.caught_up()
    producer = FakeProducer()
    w.fold([failed(OWNED, clock.now, 1)])
    assert len(w.publish(producer)) == 1
    w.fold([failed(OWNED, clock.now + 1, 2)])
    clock.now += 10
    assert w.publish(producer) == []  # only numbers moved, within the interval
    clock.now += SHORT.emit_interval_ms
    assert len(w.publish(producer)) == 1
    w.fold([failed(OWNED, clock.now + i, 10 + i) for i in range(10)])
    clock.now += 20
    [opened] = w.publish(producer)
    assert opened is not None and opened.breaker is BreakerState.OPEN  # a decision: at once


def test_restores_its_instances_from_the_partition_and_keeps_their_state() -> None:
    opened = InstanceHealth(instance_id=OWNED, agent_id="agent://demo/sick", at=99_000, breaker=BreakerState.OPEN,
                            open_until=103_000, admit=0.0, reason="10 of 10 calls failed", rules_since=99_000)
    gone = InstanceHealth(instance_id="i-2", agent_id="agent://demo/echo", at=90_000)
    records = {1: [(b"i-2", codec.encode(gone)), (OWNED.encode(), codec.encode(opened)), (b"i-2", None),
                   (b"i-3", b"garbage"), (b"i-9", codec.encode(gone))]}
    w, clock = writer(records)
    w._assigned([1])
    assert set(w.table.trackers) == {OWNED}  # i-2 tombstoned; i-3 bad; i-9 names another instance
    assert w.bad_records == 2
    w.caught_up()
    producer = FakeProducer()
    [again] = w.publish(producer)
    assert again is not None
    assert (again.breaker, again.open_until, again.reason) == (BreakerState.OPEN, 103_000, "10 of 10 calls failed")
    clock.now = 103_000
    [probing] = w.publish(producer)
    assert probing is not None and probing.breaker is BreakerState.HALF_OPEN and probing.admit == SHORT.probe_admit


def test_revocation_flushes_then_forgets_the_partition() -> None:
    published: list[tuple[str, InstanceHealth | None]] = []
    w, clock = writer(published=published)
    w._assigned([0, 1])
    w.caught_up()
    w.fold([failed(OWNED, clock.now, 1), failed(OTHER, clock.now, 2)])
    producer = FakeProducer(hold=lambda _t: False)
    w.publish(producer)
    flushed: list[Any] = []
    original = producer.flush
    producer.flush = lambda timeout=0: flushed.append(timeout) or original(timeout)  # type: ignore[method-assign]
    w._revoked(producer, [1], flush=True)
    assert flushed and len(producer.to(NAMES.health)) == 2  # acknowledged before letting go
    assert set(w.table.trackers) == {OTHER} and not w.owns(OWNED)
    assert (OWNED, None) in published  # its gauges go with it
    w.fold([failed(OWNED, clock.now + 5, 3)])
    assert OWNED not in w.table.trackers


def test_an_idle_instance_is_forgotten_with_a_tombstone() -> None:
    w, clock = writer()
    w._assigned([1])
    w.caught_up()
    w.fold([failed(OWNED, clock.now, 1)])
    producer = FakeProducer()
    w.publish(producer)
    clock.now += SHORT.forget_ms
    assert w.publish(producer) == [None]
    producer.flush()
    assert producer.sent[-1][1] is None and OWNED not in w.records()


def test_routed_receipts_are_skipped_by_their_router_header_without_decoding() -> None:
    from reach.kafka import headers as H

    w, clock = writer()
    w._assigned([1])
    routed = FakeMessage(NAMES.receipts, 0, 1, b"never decoded", None, [(H.ROUTER, b"router-1")])
    assert w.fold([routed, failed(OWNED, clock.now, 2)]) == 1
    assert w.bad_records == 0


def test_a_refused_record_is_published_again_at_the_next_tick() -> None:
    from confluent_kafka import KafkaError

    w, clock = writer()
    w._assigned([1])
    w.caught_up()
    w.fold([failed(OWNED, clock.now + i, i) for i in range(10)])
    refusing = FakeProducer(refuse=lambda _t, _v: KafkaError(KafkaError._MSG_TIMED_OUT))
    [opened] = w.publish(refusing)
    refusing.flush()  # the delivery report says it never landed
    clock.now += 1
    producer = FakeProducer()
    [again] = w.publish(producer)
    assert again is not None and opened is not None and again.breaker is opened.breaker is BreakerState.OPEN


def test_a_restarted_loop_owns_nothing_until_assigned_again() -> None:
    published: list[tuple[str, InstanceHealth | None]] = []
    w, clock = writer(published=published)
    w._assigned([1])
    w.caught_up()
    w.fold([failed(OWNED, clock.now, 1)])
    w.publish(FakeProducer())
    w._release_all()
    assert not w.owned and not w.table.trackers and not w.records()
    assert published[-1] == (OWNED, None)
    assert w.publish(FakeProducer()) == []


def test_an_idle_registered_instance_that_is_not_healthy_is_kept() -> None:
    w, clock = writer()
    w._assigned([1])
    w.caught_up()
    w.table.build_version(OWNED, "1.0.0")
    w.fold([failed(OWNED, clock.now + i, i) for i in range(10)])
    producer = FakeProducer()
    w.publish(producer)
    clock.now += SHORT.forget_ms
    [probing] = w.publish(producer)  # OPEN -> HALF_OPEN, not forgotten: it would come back at full share
    assert probing is not None and probing.breaker is BreakerState.HALF_OPEN and probing.build_version == "1.0.0"
    w.table.forget_version(OWNED)  # deregistered: now it goes
    clock.now += 100  # past forget_ms since its last call
    assert w.publish(producer) == [None]


def test_a_full_producer_queue_restarts_the_loop_rather_than_stopping_the_writer() -> None:
    w, clock = writer()
    loops: list[int] = []

    def loop() -> None:  # the first loop's produce finds librdkafka's queue full (a broker outage)
        loops.append(1)
        if len(loops) > 1:
            return
        w._assigned([1])
        w.caught_up()
        w.fold([failed(OWNED, clock.now, 1)])
        w.publish(FakeProducer(raise_on=lambda _t, _v: BufferError("Local: Queue full")))

    w._loop = loop  # type: ignore[method-assign]
    w.start()
    deadline = time.monotonic() + 10
    while len(loops) < 2 and w._thread is not None and w._thread.is_alive() and time.monotonic() < deadline:
        time.sleep(0.01)
    w.stop()
    assert len(loops) == 2, f"the writer stopped for good on {w.error!r}"


class _Feed:
    """The receipts feed: records its assignment, and what `replaying` read while the offsets were looked up."""

    def __init__(self, w: HealthWriter) -> None:
        self.w = w
        self.seen_replaying: list[bool] = []
        self.assigned: list[tuple[int, int]] = []

    def list_topics(self, topic: str, timeout: float) -> Any:
        from types import SimpleNamespace
        return SimpleNamespace(topics={topic: SimpleNamespace(error=None, partitions={0: None, 1: None})})

    def get_watermark_offsets(self, tp: Any, timeout: float) -> tuple[int, int]:
        self.seen_replaying.append(self.w.replaying)
        return 0, 0  # nothing to replay

    def offsets_for_times(self, tps: list[Any], timeout: float) -> list[Any]:
        self.seen_replaying.append(self.w.replaying)
        return [TopicPartition(tp.topic, tp.partition, -1) for tp in tps]

    def assign(self, tps: list[TopicPartition]) -> None:
        self.assigned = [(tp.partition, tp.offset) for tp in tps]

    def close(self) -> None:
        self.closed = True


def test_replaying_reads_true_until_the_feed_is_assigned_even_with_nothing_to_replay(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A caller that waits for `not replaying` and then produces must find its receipts read: with nothing to
    replay, the process's feed (at offset 0 of both partitions) hands over what follows."""
    w, clock = writer()
    w._take([], {(NAMES.receipts, 0): 0, (NAMES.receipts, 1): 0})  # where the feed reads
    w._assigned([0, 1])
    feed = _Feed(w)
    monkeypatch.setattr("reach.streams.health.writer.topicreader.open_reader", lambda *_a, **_k: feed)
    assert w._start_replay() is None
    assert feed.seen_replaying and all(feed.seen_replaying)
    assert feed.closed and not feed.assigned  # nothing below the feed's position: the reader is closed at once
    assert not w.replaying
    w._take([record_of(NAMES.receipts, b"m", failed(OWNED, clock.now, 0).value(), RECEIPT)], {})
    w._drain()
    assert w.table.calls == 1


def test_the_registry_is_read_to_its_end_before_the_writer_joins_its_group() -> None:
    """Replayed calls then carry the instances' build versions, not '' for the ones not read yet."""
    from tests.unit.routing_fixtures import reg
    w, _ = writer()
    registrations = [reg(f"i-{n}", build_version=f"1.{n}.0") for n in range(3)]
    w._take([record_of(NAMES.registry, r.instance_id.encode(), codec.encode(r), REGISTRATION, offset=n)
             for n, r in enumerate(registrations)], {(NAMES.registry, 0): 3})  # what the feed read to its end
    w.feed.loaded.set()
    w._follow_meta(timeout=5)
    assert w.table._versions == {"i-0": "1.0.0", "i-1": "1.1.0", "i-2": "1.2.0"}
