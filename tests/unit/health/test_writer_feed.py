"""The health writer on the process's feed, on the in-memory bus: the replay after an assignment and the receipts the
feed hands over meet at one boundary, so each call is counted once; a router's ROUTED receipt is never a call; the
writer and another view share one feed."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from reach.core.healthmodel.settings import HealthSettings
from reach.envelopes import now_ms
from reach.kafka import clients, codec, memory
from reach.kafka import headers as H
from reach.names import Names
from reach.records import ErrorInfo, Receipt, Status
from reach.settings import KafkaSettings
from reach.streams.feed import Feed
from reach.streams.health.writer import HealthWriter
from reach.streams.router.state import RouterState, StateLoop

NAMES = Names("hwfeed")


@pytest.fixture
def kafka() -> Iterator[KafkaSettings]:
    name = f"hwfeed-{uuid.uuid4().hex[:8]}"
    bus = memory.bus(name)
    for topic, partitions in ((NAMES.health, 2), (NAMES.receipts, 2), (NAMES.control, 1), (NAMES.registry, 1)):
        bus.create_topic(topic, partitions)
    yield KafkaSettings(bootstrap=memory.SCHEME + name)
    memory.forget(name)


def failures(kafka: KafkaSettings, instance: str, count: int, *, routed: bool = False) -> None:
    producer = clients.producer(kafka)
    for n in range(count):
        receipt = Receipt(message_id=f"{instance}-{uuid.uuid4().hex[:6]}-{n}", trace_id="t", tenant="d",
                          capability="demo.echo", agent_id="agent://demo/sick", instance_id=instance,
                          status=Status.ATTEMPT_FAILED, at=now_ms(),
                          error=ErrorInfo(kind="TRANSIENT", code="SICK", message="sick"))
        producer.produce(NAMES.receipts, key=receipt.message_id.encode(), value=codec.encode(receipt),
                         headers=[(H.ROUTER, b"r1")] if routed else None)
    assert producer.flush(1) == 0


def until(check: Callable[[], Any], what: str, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, f"{what}: not seen within {timeout}s"
        time.sleep(0.01)


def test_replayed_and_fed_receipts_are_each_counted_once(kafka: KafkaSettings) -> None:
    settings = HealthSettings(replay_ms=60_000, tick_ms=50, open_ms=600_000)
    feed = Feed(names=NAMES, kafka=kafka)
    state = RouterState()
    router_state = StateLoop(state=state, names=NAMES, kafka=kafka, router_id="r1", feed=feed)
    writer = HealthWriter(names=NAMES, kafka=kafka, settings=settings, feed=feed)
    failures(kafka, "i-1", 7)  # before the writer: only its replay reads them
    failures(kafka, "i-1", 3, routed=True)  # a router's ROUTED receipts: never calls
    router_state.start()
    writer.start()
    try:
        until(lambda: writer.owned == {0, 1} and not writer.replaying, "the writer owning both partitions")
        until(lambda: writer.table.calls == 7, "the replayed calls")
        failures(kafka, "i-1", 5)  # after the replay: the feed hands them over
        until(lambda: writer.table.calls == 12, "the fed calls")
        assert state.ready.is_set(), "the router's state view read through the same feed"
        assert feed.decoded <= 15, "each receipt decoded at most once for both views (the ROUTED ones never)"
        assert writer.error is None and feed.error is None
    finally:
        writer.stop(5)
        router_state.stop(5)
    assert not feed.running


def test_the_replay_stops_at_the_feeds_boundary_and_the_feed_goes_on_from_it(kafka: KafkaSettings) -> None:
    """The replay reader fetches past the boundary (also for a partition it finished): those records are the
    feed's, and the ones the feed had queued before the boundary are the replay's."""
    from confluent_kafka import TopicPartition

    from reach.streams.feed import RECEIPT, record_of

    failures(kafka, "i-1", 6)  # murmur2 spreads them over both receipts partitions
    ends = {p: memory.bus(kafka.servers().removeprefix(memory.SCHEME)).watermarks((NAMES.receipts, p))[1]
            for p in (0, 1)}
    reader = clients.consumer("probe", kafka)
    reader.assign([TopicPartition(NAMES.receipts, p, 0) for p in (0, 1)])
    logged = sorted(clients.take(reader, 100, 1.0), key=lambda m: (m.partition(), m.offset()))
    reader.close()
    assert len(logged) == 6
    writer = HealthWriter(names=NAMES, kafka=kafka, settings=HealthSettings(replay_ms=60_000),
                          feed=Feed(names=NAMES, kafka=kafka))
    writer.partitions = 2
    writer._assigned([0, 1])
    boundary = {p: max(ends[p] - 1, 0) for p in ends}  # the feed has read all but the last of each partition
    queued = [m for m in logged if m.offset() < boundary[m.partition()]]
    rest = [m for m in logged if m.offset() >= boundary[m.partition()]]

    def fed(messages: list[Any]) -> list[Any]:
        return [record_of(m.topic(), m.key(), m.value(), RECEIPT, partition=m.partition(), offset=m.offset())
                for m in messages]

    writer._take(fed(queued), {(NAMES.receipts, p): o for p, o in boundary.items()})
    replay = writer._start_replay()
    assert replay is not None and writer.replaying
    while writer._replay_to:
        writer.fold(writer._below_boundary(clients.take(replay, 100, 0.5)))
    replay.close()
    assert writer.table.calls == len(queued), "the replay counts what lies below the boundary, once"
    writer._take(fed(rest), {(NAMES.receipts, p): o for p, o in ends.items()})
    writer._drain()
    assert writer.table.calls == 6, "the feed counts the rest, once"
