"""The shared read-to-end loop on an in-memory consumer: a compacted tail ends the read, a stuck one fails."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any, cast

import pytest

from reach.errors import InfraUnavailable
from reach.kafka import topicreader
from tests.unit.streams.kafka_fakes import FakeMessage, FakeReader


def test_a_tail_without_records_ends_the_read_by_position() -> None:
    reader = FakeReader([FakeMessage("t", 0, 0, b"a"), FakeMessage("t", 0, 1, b"b")], high=5, position=5,
                        flaky=2)
    got = list(topicreader.read_range(cast(Any, reader), "t", {0: 0}, idle_timeout=5))
    assert [m.value() for m in got] == [b"a", b"b"]


def test_a_read_that_cannot_reach_the_end_fails_instead_of_returning_part() -> None:
    reader = FakeReader([FakeMessage("t", 0, 0, b"a")], high=5, position=1)
    with pytest.raises(InfraUnavailable, match="Timed out"):
        list(topicreader.read_range(cast(Any, reader), "t", {0: 0}, idle_timeout=0.3))


class _FreshTopic:
    """A consumer whose topic has no partition leader for the first `not_led` offset lookups."""

    def __init__(self, not_led: int, per_partition: bool) -> None:
        self.not_led, self.per_partition = not_led, per_partition

    def list_topics(self, topic: str, timeout: float) -> Any:
        return SimpleNamespace(topics={topic: SimpleNamespace(error=None, partitions={0: None, 1: None})})

    def offsets_for_times(self, tps: list[Any], timeout: float) -> list[Any]:
        from confluent_kafka import KafkaError, KafkaException, TopicPartition

        self.not_led -= 1
        if self.not_led >= 0 and not self.per_partition:
            raise KafkaException(KafkaError(KafkaError.NOT_LEADER_FOR_PARTITION))
        if self.not_led >= 0:  # confluent-kafka's entries are read-only; the same fields, with an error
            return [SimpleNamespace(partition=tp.partition, offset=-1001,
                                    error=KafkaError(KafkaError.NOT_LEADER_FOR_PARTITION)) for tp in tps]
        return [TopicPartition(tp.topic, tp.partition, 7 if tp.partition == 0 else -1) for tp in tps]

    def get_watermark_offsets(self, tp: Any, timeout: float) -> tuple[int, int]:
        return 0, 9


@pytest.mark.parametrize("per_partition", [False, True])
def test_offsets_by_time_wait_for_a_fresh_partition_leader(per_partition: bool) -> None:
    consumer = _FreshTopic(not_led=3, per_partition=per_partition)
    assert topicreader.start_offsets(cast(Any, consumer), "t", since_ms=1, timeout=5) == {0: 7, 1: 9}


def test_offsets_by_time_fail_clearly_when_no_leader_comes() -> None:
    with pytest.raises(InfraUnavailable, match="offsets of t by time"):
        topicreader.start_offsets(cast(Any, _FreshTopic(not_led=10_000, per_partition=False)), "t", since_ms=1,
                                  timeout=0.3)


class _Landing(_FreshTopic):
    """Records land on partition 1 between the end query and the lookup by time (which finds none yet)."""

    def __init__(self) -> None:
        super().__init__(not_led=0, per_partition=False)
        self.high = 5

    def offsets_for_times(self, tps: list[Any], timeout: float) -> list[Any]:
        found = super().offsets_for_times(tps, timeout)
        self.high = 9  # four records landed just after the lookup by time ran
        return found

    def get_watermark_offsets(self, tp: Any, timeout: float) -> tuple[int, int]:
        return 0, self.high


def test_a_partition_with_nothing_since_starts_at_its_end_from_before_the_lookup() -> None:
    """Offset 5..8 landed after the lookup: a start at the later end (9) would skip them."""
    assert topicreader.start_offsets(cast(Any, _Landing()), "t", since_ms=1, timeout=5) == {0: 7, 1: 5}


class _Refused(_FreshTopic):
    def offsets_for_times(self, tps: list[Any], timeout: float) -> list[Any]:
        from confluent_kafka import KafkaError, KafkaException
        raise KafkaException(KafkaError(KafkaError.TOPIC_AUTHORIZATION_FAILED))


def test_an_error_no_wait_can_mend_fails_at_once() -> None:
    import time
    started = time.monotonic()
    with pytest.raises(InfraUnavailable, match="offsets of t by time"):
        topicreader.start_offsets(cast(Any, _Refused(not_led=0, per_partition=False)), "t", since_ms=1, timeout=5)
    assert time.monotonic() - started < 1  # not the whole 5 s of retries a missing leader gets
