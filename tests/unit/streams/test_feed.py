"""The process's feed on the in-memory bus: one consumer, each record decoded once and handed to every view of its
topic; bad records reach the views marked, a registry outage is read again without a duplicate, a failing view
starves no other, and a missing topic is NotReady unless optional."""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any

import pytest

from reach.core.commits import TopicPart
from reach.kafka import clients, memory
from reach.kafka import headers as H
from reach.kafka.codec import RegistryUnavailable, encode
from reach.names import Names
from reach.records import Receipt, Status
from reach.settings import KafkaSettings
from reach.streams import feed as module
from reach.streams.exceptions import NotReady
from reach.streams.feed import RECEIPT, REGISTRATION, Feed, Record, Start, Tail
from tests.unit.routing_fixtures import reg

NAMES = Names("feed")


@pytest.fixture
def kafka() -> Iterator[KafkaSettings]:
    name = f"feed-{uuid.uuid4().hex[:8]}"
    settings = KafkaSettings(bootstrap=memory.SCHEME + name)
    bus = memory.bus(name)
    bus.create_topic(NAMES.registry, 1)
    bus.create_topic(NAMES.receipts, 2)
    yield settings
    memory.forget(name)


class View:
    """Collects what the feed hands over, and the positions it reports."""

    def __init__(self, fail: bool = False) -> None:
        self.records: list[Record] = []
        self.reached: dict[TopicPart, int] = {}
        self.fail = fail
        self.lock = threading.Lock()

    def take(self, records: list[Record], reached: Mapping[TopicPart, int]) -> None:
        if self.fail:
            raise RuntimeError("a view with a bug")
        with self.lock:
            self.records.extend(records)
            self.reached.update(reached)

    def of(self, topic: str) -> list[Record]:
        with self.lock:
            return [r for r in self.records if r.topic == topic]


def receipt(message_id: str, status: Status = Status.COMPLETED) -> bytes:
    return encode(Receipt(message_id=message_id, trace_id="t", tenant="d", capability="x.y", status=status, at=1,
                          agent_id="agent://a/b", instance_id="i1"))


def produce(kafka: KafkaSettings, topic: str, records: list[tuple[bytes | None, bytes | None]],
            headers: list[tuple[str, bytes]] | None = None) -> None:
    producer = clients.producer(kafka)
    for key, value in records:
        producer.produce(topic, key=key, value=value, headers=headers)
    assert producer.flush(1) == 0


@contextmanager
def receipts_feed(kafka: KafkaSettings, view: View) -> Iterator[Feed]:
    """A started feed with one view of the receipts topic, loaded."""
    feed = Feed(names=NAMES, kafka=kafka)
    feed.subscribe("v", [Tail(NAMES.receipts, Start.END, RECEIPT)], view.take)
    feed.acquire()
    try:
        assert feed.wait_loaded(5)
        yield feed
    finally:
        feed.release(5)


def until(check: Callable[[], Any], what: str, timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, f"{what}: not seen within {timeout}s"
        time.sleep(0.01)


def test_each_record_is_decoded_once_and_handed_to_every_view_of_its_topic(kafka: KafkaSettings) -> None:
    produce(kafka, NAMES.registry, [(b"i1", encode(reg("i1"))), (b"i2", encode(reg("i2")))])
    produce(kafka, NAMES.receipts, [(b"old", receipt("old"))])  # before the feed: END views never see it
    feed = Feed(names=NAMES, kafka=kafka)
    a, b, loaded = View(), View(), threading.Event()
    feed.subscribe("a", [Tail(NAMES.registry, Start.BEGINNING, REGISTRATION),
                         Tail(NAMES.receipts, Start.END, RECEIPT)], a.take, on_loaded=loaded.set)
    feed.subscribe("b", [Tail(NAMES.receipts, Start.END, RECEIPT)], b.take)
    feed.acquire()
    try:
        assert feed.wait_loaded(5) and loaded.is_set()
        assert [r.decoded.instance_id for r in a.of(NAMES.registry)] == ["i1", "i2"]
        assert b.reached.keys() == {(NAMES.receipts, 0), (NAMES.receipts, 1)}, "b learns where its reads start"
        produce(kafka, NAMES.receipts, [(f"m{n}".encode(), receipt(f"m{n}")) for n in range(10)])
        until(lambda: len(a.of(NAMES.receipts)) == 10 and len(b.of(NAMES.receipts)) == 10, "ten receipts each")
        assert all(x is y for x, y in zip(sorted(a.of(NAMES.receipts), key=lambda r: (r.partition, r.offset)),
                                          sorted(b.of(NAMES.receipts), key=lambda r: (r.partition, r.offset)),
                                          strict=True)), "one decoded record, shared"
        assert {r.decoded["message_id"] for r in b.of(NAMES.receipts)} == {f"m{n}" for n in range(10)}
        assert feed.decoded == 12, "two registrations and ten receipts, each decoded once"
        assert sum(b.reached.values()) == 11, "the positions cover every receipt, the one before the feed too"
    finally:
        feed.release(5)
    assert not feed.running


def test_a_record_no_view_accepts_is_never_decoded(kafka: KafkaSettings) -> None:
    feed = Feed(names=NAMES, kafka=kafka)
    foreign, canary = View(), View()
    running = threading.Event()
    feed.subscribe("state", [Tail(NAMES.receipts, Start.END, RECEIPT,
                                  accept=lambda msg: (H.ROUTER, b"me") not in (msg.headers() or ()))], foreign.take)
    feed.subscribe("canary", [Tail(NAMES.receipts, Start.END, RECEIPT, accept=lambda _m: running.is_set())],
                   canary.take)
    feed.acquire()
    try:
        assert feed.wait_loaded(5)
        produce(kafka, NAMES.receipts, [(b"m1", b"never decoded")], headers=[(H.ROUTER, b"me")])
        until(lambda: sum(foreign.reached.values()) == 1, "the feed past the record")
        assert feed.decoded == 0 and not foreign.records and not canary.records
        running.set()
        produce(kafka, NAMES.receipts, [(b"m2", receipt("m2"))], headers=[(H.ROUTER, b"me")])
        until(lambda: canary.records, "the canary's receipt")
        assert feed.decoded == 1 and not foreign.records
    finally:
        feed.release(5)


def test_a_bad_record_reaches_the_views_marked_and_the_feed_goes_on(kafka: KafkaSettings) -> None:
    view = View()
    with receipts_feed(kafka, view) as feed:
        produce(kafka, NAMES.receipts, [(b"m", b"\x00garbage"), (b"m", receipt("m")), (b"m", None)])
        until(lambda: len(view.records) == 3, "three records")
        bad, good, tombstone = view.records
        assert bad.error is not None and bad.decoded is None
        assert good.error is None and good.decoded["message_id"] == "m"
        assert tombstone.value is None and tombstone.decoded is None and tombstone.error is None
        assert feed.error is None


def test_a_registry_outage_is_read_again_from_the_record_with_no_duplicate(kafka: KafkaSettings,
                                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    real = module.decode_receipt  # what RECEIPT decodes with (with a registry, the codec raises this)
    outage = {"left": 1}

    def flaky(value: bytes) -> dict[str, Any]:
        if value == receipt("m3") and outage["left"]:
            outage["left"] -= 1
            raise RegistryUnavailable("the registry did not answer")
        return real(value)

    monkeypatch.setattr(module, "decode_receipt", flaky)
    monkeypatch.setattr(Feed, "backoff_first_s", 0.01)
    view = View()
    with receipts_feed(kafka, view) as feed:
        producer = clients.producer(kafka)
        for n in range(6):  # one partition: the order is the offset order
            producer.produce(NAMES.receipts, key=b"k", value=receipt(f"m{n}"), partition=0)
        assert producer.flush(1) == 0
        until(lambda: len(view.records) >= 6, "six receipts")
        assert [r.decoded["message_id"] for r in view.records] == [f"m{n}" for n in range(6)]
        assert outage["left"] == 0 and feed.error is None, "restarted, recovered"


def test_a_failing_view_starves_no_other(kafka: KafkaSettings) -> None:
    feed = Feed(names=NAMES, kafka=kafka)
    broken, fine = View(fail=True), View()
    feed.subscribe("broken", [Tail(NAMES.receipts, Start.END, RECEIPT)], broken.take)
    feed.subscribe("fine", [Tail(NAMES.receipts, Start.END, RECEIPT)], fine.take)
    feed.acquire()
    try:
        assert feed.wait_loaded(5)
        produce(kafka, NAMES.receipts, [(b"m", receipt("m"))])
        until(lambda: fine.records, "the fine view's receipt")
        assert feed.error is None and feed.running
    finally:
        feed.release(5)


def test_a_missing_topic_is_not_ready_unless_the_view_can_go_without_it(kafka: KafkaSettings) -> None:
    optional = Feed(names=NAMES, kafka=kafka)
    view = View()
    optional.subscribe("v", [Tail(NAMES.loads, Start.END, RECEIPT, required=False, missing="loads are guessed"),
                             Tail(NAMES.registry, Start.BEGINNING, REGISTRATION)], view.take)
    required = Feed(names=NAMES, kafka=kafka)
    required.subscribe("v", [Tail(NAMES.health, Start.BEGINNING, REGISTRATION)], View().take)
    optional.acquire()
    required.acquire()
    try:
        assert optional.wait_loaded(5) and optional.error is None
        until(lambda: isinstance(required.error, NotReady), "NotReady")
        assert "reach topics apply" in str(required.error)
    finally:
        optional.release(5)
        required.release(5)


def test_views_subscribe_before_the_feed_starts_and_agree_on_decoding(kafka: KafkaSettings) -> None:
    feed = Feed(names=NAMES, kafka=kafka)
    feed.subscribe("a", [Tail(NAMES.receipts, Start.END, RECEIPT)], View().take)
    with pytest.raises(ValueError, match="decodes"):
        feed.subscribe("b", [Tail(NAMES.receipts, Start.END, REGISTRATION)], View().take)
    feed.acquire()
    feed.acquire()  # a second user: one feed
    try:
        with pytest.raises(RuntimeError, match="after it started"):
            feed.subscribe("late", [Tail(NAMES.receipts, Start.END, RECEIPT)], View().take)
        feed.release(5)
        assert feed.running, "one user left"
    finally:
        feed.release(5)
    assert not feed.running


def test_a_view_from_the_end_skips_what_a_view_from_the_beginning_reads(kafka: KafkaSettings) -> None:
    produce(kafka, NAMES.registry, [(b"i1", encode(reg("i1")))])
    feed = Feed(names=NAMES, kafka=kafka)
    whole, tail = View(), View()
    feed.subscribe("whole", [Tail(NAMES.registry, Start.BEGINNING, REGISTRATION)], whole.take)
    feed.subscribe("tail", [Tail(NAMES.registry, Start.END, REGISTRATION)], tail.take)
    feed.acquire()
    try:
        assert feed.wait_loaded(5)
        produce(kafka, NAMES.registry, [(b"i2", encode(reg("i2")))])
        until(lambda: len(whole.records) == 2 and tail.records, "both registrations")
        assert [r.key for r in tail.records] == [b"i2"]
    finally:
        feed.release(5)
