"""Instances of one process share a producer, a cancel and control feed and a freeze ticker (decision 0073):
each handle's close is its own, the last one closes the shared object, and a producer the broker failed is not
handed to instances started after it."""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Iterator

import pytest

from reach.agent import shared
from reach.agent.exceptions import DeliveryFailed
from reach.agent.ownership import Ownership
from reach.kafka import clients, memory
from reach.names import Names
from reach.settings import KafkaSettings


@pytest.fixture
def kafka() -> Iterator[KafkaSettings]:
    name = f"shared-{uuid.uuid4().hex[:8]}"
    bus = memory.bus(name)
    for topic in ("ns.registry", "ns.cancels", "ns.control"):
        bus.create_topic(topic, 1)
    yield KafkaSettings(bootstrap=memory.SCHEME + name)
    memory.forget(name)


def _records(kafka: KafkaSettings, topic: str) -> list[bytes | None]:
    reader = clients.consumer(f"g-{uuid.uuid4().hex[:6]}", kafka)
    reader.subscribe([topic])
    out = [m.key() for m in clients.take(reader, 100, 0.5)]
    reader.close()
    return out


def test_instances_send_through_one_producer_and_one_closing_leaves_the_other_sending(kafka: KafkaSettings) -> None:
    first, second = shared.publisher(kafka), shared.publisher(kafka)
    assert first._publisher is second._publisher, "one producer per process and settings"
    first.send("ns.registry", "a", b"1").result(5)
    assert first.close(5) == 0
    second.send("ns.registry", "b", b"2").result(5)  # the neighbour's producer is still open
    assert second.close(5) == 0
    assert _records(kafka, "ns.registry") == [b"a", b"b"]
    third = shared.publisher(kafka)
    assert third._publisher is not first._publisher, "the last close closed it: a new instance gets a new one"
    third.close(5)


def test_a_producer_the_broker_failed_is_not_given_to_the_next_instance(kafka: KafkaSettings) -> None:
    holder = shared.publisher(kafka)
    failed = holder._publisher
    holder.send("ns.registry", "a", b"1").result(5)
    holder._settled(_failed_future())  # what a DeliveryFailed ack does: the broker's trouble, not the record's
    newcomer = shared.publisher(kafka)
    assert newcomer._publisher is not failed
    holder.close(5)
    newcomer.close(5)


def _failed_future():  # type: ignore[no-untyped-def]
    from concurrent.futures import Future
    future: Future[object] = Future()
    future.set_exception(DeliveryFailed("ns.registry: the broker did not acknowledge a record"))
    return future


def test_the_feed_is_one_per_process_and_stops_with_its_last_holder(kafka: KafkaSettings) -> None:
    names = Names("ns")
    one = shared.cancel_feed(topic=names.cancels, control_topic=names.control, kafka=kafka)
    two = shared.cancel_feed(topic=names.cancels, control_topic=names.control, kafka=kafka)
    assert one._feed is two._feed and one.view is two.view and one.book is two.book
    one.start(5)
    two.start(5)
    assert two.caught_up.is_set(), "a later instance starts knowing what was there"
    feed = one._feed
    one.stop()
    one.stop()  # the runner stops it twice (through its control and directly): one release
    assert not feed._stop.is_set(), "the other instance still follows"
    two.stop()
    assert feed._stop.is_set()


def test_one_thread_ticks_every_started_ownership_and_ends_with_the_last(kafka: KafkaSettings) -> None:
    a, b = Ownership(stale_s=3.0, settle_s=1.0), Ownership(stale_s=3.0, settle_s=1.0)
    a.start()
    b.start()
    tickers = [t for t in threading.enumerate() if t.name == "reach-ownership"]
    assert len(tickers) == 1
    before = (a._ticked, b._ticked)
    time.sleep(0.6)
    assert a._ticked > before[0] and b._ticked > before[1], "both ticked by the one thread"
    a.stop()
    b.stop()
    tickers[0].join(2)
    assert not tickers[0].is_alive()


def test_instances_starting_together_share_one_registry_read_and_a_finished_read_is_not_reused(
        kafka: KafkaSettings, monkeypatch: pytest.MonkeyPatch) -> None:
    from reach.core.views.registryview import RegistryView

    release = threading.Event()
    reads: list[RegistryView] = []

    def read(*_a: object, **_k: object) -> RegistryView:
        release.wait(5)
        reads.append(RegistryView())
        return reads[-1]
    monkeypatch.setattr(shared, "read_registry", read)
    names = Names(f"ns{uuid.uuid4().hex[:6]}")
    seen: list[RegistryView] = []
    threads = [threading.Thread(target=lambda: seen.append(shared.registry(kafka, names))) for _ in range(5)]
    for t in threads:
        t.start()
    time.sleep(0.2)
    release.set()
    for t in threads:
        t.join(5)
    assert len(reads) == 1 and len(seen) == 5 and all(v is reads[0] for v in seen)
    assert shared.registry(kafka, names) is not reads[0], "asked after the read ended: read again"
    assert len(reads) == 2
