"""The agent's one tail consumer for cancels and control (decision 0044), on an in-memory multi-topic reader: both
are known when start() returns, a missing topic leaves the other followed, and a control record that needs the
unreachable Schema Registry is read again, not skipped, while the cancels of its batch still count."""

from __future__ import annotations

import time
from types import SimpleNamespace
from typing import Any

import pytest
from confluent_kafka import TopicPartition

from reach.agent import cancelfeed
from reach.agent.cancelfeed import CancelFeed
from reach.agent.policy import AgentControl, Mode
from reach.cancels import CancelRecord
from reach.control import instance_record
from reach.envelopes import now_ms
from reach.kafka import codec
from reach.kafka.codec import RegistryUnavailable
from reach.names import Names
from reach.records import InstanceAction
from reach.settings import KafkaSettings
from tests.unit.streams.kafka_fakes import FakeMessage

NAMES = Names("ns")


class Log:
    """Topics with one partition each; `missing` names topics that do not exist (yet)."""

    def __init__(self, records: dict[str, list[tuple[bytes | None, bytes]]], missing: set[str] | None = None) -> None:
        self.topics = {t: [FakeMessage(t, 0, n, v, k) for n, (k, v) in enumerate(rs)] for t, rs in records.items()}
        self.missing = missing or set()
        self.readers: list[Reader] = []

    def reader(self) -> Reader:
        self.readers.append(Reader(self))
        return self.readers[-1]


class Reader:
    def __init__(self, log: Log) -> None:
        self.log = log
        self.next: dict[str, int] = {}
        self.seeks: list[tuple[str, int]] = []

    def list_topics(self, topic: str, timeout: float) -> Any:
        found = {} if topic in self.log.missing else {topic: SimpleNamespace(error=None, partitions={0: None})}
        return SimpleNamespace(topics=found)

    def offsets_for_times(self, tps: list[TopicPartition], timeout: float) -> list[TopicPartition]:
        return [TopicPartition(tp.topic, 0, 0 if self.log.topics[tp.topic] else -1) for tp in tps]

    def get_watermark_offsets(self, tp: TopicPartition, timeout: float) -> tuple[int, int]:
        return 0, len(self.log.topics[tp.topic])

    def assign(self, tps: list[TopicPartition]) -> None:
        assert all(tp.offset >= 0 for tp in tps), "start offsets are concrete"
        self.next = {tp.topic: tp.offset for tp in tps}

    def consume(self, n: int, timeout: float) -> list[FakeMessage]:
        out: list[FakeMessage] = []
        for topic in self.next:
            while len(out) < n and self.next[topic] < len(self.log.topics[topic]):
                out.append(self.log.topics[topic][self.next[topic]])
                self.next[topic] += 1
        if not out:
            time.sleep(min(timeout, 0.01))
        return out

    def poll(self, timeout: float) -> FakeMessage | None:
        got = self.consume(1, timeout)
        return got[0] if got else None

    def position(self, tps: list[TopicPartition]) -> list[TopicPartition]:
        return [TopicPartition(tp.topic, 0, self.next.get(tp.topic, 0)) for tp in tps]

    def seek(self, tp: TopicPartition) -> None:
        self.seeks.append((tp.topic, tp.offset))
        self.next[tp.topic] = tp.offset

    def close(self) -> None:
        pass


def cancel(message_id: str) -> tuple[None, bytes]:
    return None, CancelRecord(message_id=message_id, tenant="acme", at=now_ms()).encode()


def drain(instance: str) -> tuple[bytes, bytes]:
    control = instance_record(instance, InstanceAction.DRAIN)
    return control.key.encode(), codec.encode(control)


def tails(log: Log) -> CancelFeed:
    return CancelFeed(topic=NAMES.cancels, control_topic=NAMES.control, kafka=KafkaSettings(), retry_s=0.05,
                      open_reader=log.reader)  # type: ignore[arg-type, return-value]


def test_cancels_and_control_are_known_when_start_returns_from_one_reader() -> None:
    log = Log({NAMES.cancels: [cancel("m1")], NAMES.control: [drain("i-1")]})
    feed = tails(log)
    control = AgentControl(feed, instance_id="i-1")
    control.start()
    try:
        assert feed.caught_up.is_set() and feed.book.cancelled("m1", "acme")
        assert control.mode() is Mode.DRAIN
        assert len(log.readers) == 1, "one consumer for both topics"
        feed.start()  # the runner starts it as the control source and as the cancel feed: once
        assert len(log.readers) == 1
    finally:
        control.stop()


def test_a_missing_cancels_topic_leaves_control_followed_and_is_picked_up_once_it_exists() -> None:
    log = Log({NAMES.cancels: [cancel("m1")], NAMES.control: [drain("i-1")]}, missing={NAMES.cancels})
    feed = tails(log)
    started = time.monotonic()
    feed.start(timeout=5)
    try:
        assert time.monotonic() - started < 2 and feed.view.instance_action("i-1") is InstanceAction.DRAIN
        assert not feed.book.cancelled("m1", "acme")
        log.missing.clear()  # `reach topics apply` ran
        deadline = time.monotonic() + 5
        while not feed.book.cancelled("m1", "acme") and time.monotonic() < deadline:
            time.sleep(0.02)
        assert feed.book.cancelled("m1", "acme")
    finally:
        feed.stop()


def test_a_control_record_is_read_again_after_a_registry_outage(monkeypatch: pytest.MonkeyPatch) -> None:
    log = Log({NAMES.cancels: [cancel("m1")], NAMES.control: [drain("i-1")]})
    real, failures = cancelfeed.apply_record, [1]

    def flaky(*args: Any, **kwargs: Any) -> bool:
        if failures[0]:
            failures[0] -= 1
            raise RegistryUnavailable("registry down")
        return real(*args, **kwargs)

    monkeypatch.setattr(cancelfeed, "apply_record", flaky)
    monkeypatch.setattr(cancelfeed, "REGISTRY_PAUSE_S", 0.01)
    feed = tails(log)
    feed.start(timeout=5)
    try:
        assert feed.caught_up.is_set() and feed.book.cancelled("m1", "acme")
        assert feed.view.instance_action("i-1") is InstanceAction.DRAIN
        assert log.readers[0].seeks == [(NAMES.control, 0)]
    finally:
        feed.stop()
