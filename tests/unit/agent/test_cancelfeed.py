"""The agent's cancel feed on in-memory consumers: a cancel already in the topic is known when start() returns,
a broker that cannot be read at first is opened again, and a missing topic does not hold the agent up."""

from __future__ import annotations

import time
from types import SimpleNamespace
from typing import Any

from confluent_kafka import KafkaError, KafkaException, TopicPartition

from reach.agent.cancelfeed import CancelFeed
from reach.cancels import CancelRecord
from reach.envelopes import now_ms
from reach.settings import KafkaSettings
from tests.unit.streams.kafka_fakes import FakeMessage

TOPIC = "ns.cancels"


class Cancels:
    """`<ns>.cancels` with one partition holding `records`; a reader fails its first `broken` lookups."""

    def __init__(self, records: list[bytes], *, broken: int = 0, missing: bool = False) -> None:
        self.log = [FakeMessage(TOPIC, 0, n, value) for n, value in enumerate(records)]
        self.broken, self.missing, self.opened = broken, missing, 0

    def reader(self) -> Reader:
        self.opened += 1
        return Reader(self)


class Reader:
    def __init__(self, topic: Cancels) -> None:
        self.topic, self.next, self.assigned = topic, 0, False

    def list_topics(self, topic: str, timeout: float) -> Any:
        if self.topic.broken:
            self.topic.broken -= 1
            raise KafkaException(KafkaError(KafkaError._TRANSPORT))
        found = {} if self.topic.missing else {topic: SimpleNamespace(error=None, partitions={0: None})}
        return SimpleNamespace(topics=found)

    def offsets_for_times(self, tps: list[TopicPartition], timeout: float) -> list[TopicPartition]:
        return [TopicPartition(TOPIC, 0, 0 if self.topic.log else -1)]

    def get_watermark_offsets(self, tp: TopicPartition, timeout: float) -> tuple[int, int]:
        return 0, len(self.topic.log)

    def assign(self, tps: list[TopicPartition]) -> None:
        assert all(tp.offset >= 0 for tp in tps), "start offsets are concrete"
        self.next, self.assigned = tps[0].offset, True

    def poll(self, timeout: float) -> FakeMessage | None:
        if self.assigned and self.next < len(self.topic.log):
            self.next += 1
            return self.topic.log[self.next - 1]
        time.sleep(min(timeout, 0.01))
        return None

    def consume(self, n: int, timeout: float) -> list[FakeMessage]:
        out = []
        while len(out) < n and (msg := self.poll(0)) is not None:
            out.append(msg)
        return out

    def position(self, tps: list[TopicPartition]) -> list[TopicPartition]:
        return [TopicPartition(TOPIC, 0, self.next)]

    def close(self) -> None:
        pass


def cancel(message_id: str) -> bytes:
    return CancelRecord(message_id=message_id, tenant="acme", at=now_ms()).encode()


def feed(topic: Cancels) -> CancelFeed:
    return CancelFeed(topic=TOPIC, kafka=KafkaSettings(), retry_s=0.05, open_reader=topic.reader)  # type: ignore[arg-type, return-value]


def test_a_cancel_already_in_the_topic_is_known_when_start_returns() -> None:
    cancels = feed(Cancels([cancel(f"m{n}") for n in range(1_200)] + [b"not a cancel"]))
    cancels.start(timeout=5)
    try:
        assert cancels.caught_up.is_set()
        assert cancels.book.cancelled("m1199", "acme") and cancels.book.cancelled("m0", "acme")
    finally:
        cancels.stop()


def test_a_broker_that_cannot_be_read_at_first_is_opened_again() -> None:
    topic = Cancels([cancel("m1")], broken=3)
    cancels = feed(topic)
    cancels.start(timeout=5)
    try:
        assert cancels.book.cancelled("m1", "acme") and topic.opened == 4
    finally:
        cancels.stop()


def test_a_missing_topic_does_not_hold_the_agent_up_and_is_followed_once_it_exists() -> None:
    topic = Cancels([cancel("m1")], missing=True)
    cancels = feed(topic)
    started = time.monotonic()
    cancels.start(timeout=5)
    try:
        assert time.monotonic() - started < 2 and not cancels.book.cancelled("m1", "acme")
        topic.missing = False  # `reach topics apply` ran
        deadline = time.monotonic() + 5
        while not cancels.book.cancelled("m1", "acme") and time.monotonic() < deadline:
            time.sleep(0.02)
        assert cancels.book.cancelled("m1", "acme")
    finally:
        cancels.stop()


class Busy(Cancels):
    """A new cancel lands at every poll: the feed never sees an empty batch."""

    def reader(self) -> Reader:
        topic = self
        self.opened += 1

        class Steady(Reader):
            def poll(self, timeout: float) -> FakeMessage | None:
                topic.log.append(FakeMessage(TOPIC, 0, len(topic.log), cancel(f"new{len(topic.log)}")))
                return super().poll(timeout)

        return Steady(self)


def test_steady_cancel_traffic_does_not_keep_the_feed_from_catching_up() -> None:
    cancels = feed(Busy([cancel("old")]))
    started = time.monotonic()
    cancels.start(timeout=5)
    try:
        assert cancels.caught_up.is_set() and time.monotonic() - started < 2
        assert cancels.book.cancelled("old", "acme")
    finally:
        cancels.stop()


class Refused(Cancels):
    """The broker answers, but refuses the offset lookups: InfraUnavailable, which is a ReachError too."""

    def reader(self) -> Reader:
        self.opened += 1

        class Refusing(Reader):
            def get_watermark_offsets(self, tp: TopicPartition, timeout: float) -> tuple[int, int]:
                raise KafkaException(KafkaError(KafkaError.TOPIC_AUTHORIZATION_FAILED))

        return Refusing(self)


def test_a_broker_in_trouble_is_waited_for_not_taken_for_a_missing_topic() -> None:
    """start() waits and warns; `caught_up` stays unset (it would claim cancels were read that were not)."""
    topic = Refused([cancel("m1")])
    cancels = feed(topic)
    cancels.start(timeout=0.5)
    try:
        assert not cancels.caught_up.is_set() and not cancels.book.cancelled("m1", "acme")
    finally:
        cancels.stop()
