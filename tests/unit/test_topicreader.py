"""The shared read-to-end loop on an in-memory consumer: a compacted tail ends the read, a stuck one fails."""

from __future__ import annotations

from typing import Any, cast

import pytest
from confluent_kafka import KafkaError, KafkaException, TopicPartition

from reach import topicreader
from reach.errors import InfraUnavailable
from tests.unit.streams.kafka_fakes import FakeMessage


class FakeReader:
    """Serves `records` once; the position after them is `position`; watermarks fail `flaky` times first."""

    def __init__(self, records: list[FakeMessage], high: int, position: int, flaky: int = 0) -> None:
        self.records, self.high, self._position, self.flaky = records, high, position, flaky

    def get_watermark_offsets(self, _tp: Any, timeout: float = 0) -> tuple[int, int]:
        if self.flaky:
            self.flaky -= 1
            raise KafkaException(KafkaError(KafkaError.NOT_LEADER_FOR_PARTITION))
        return 0, self.high

    def assign(self, _tps: Any) -> None:
        pass

    def poll(self, _timeout: float) -> FakeMessage | None:
        return self.records.pop(0) if self.records else None

    def consume(self, _n: int, _timeout: float) -> list[FakeMessage]:
        out, self.records = self.records, []
        return out

    def position(self, tps: list[TopicPartition]) -> list[TopicPartition]:
        return [TopicPartition(tp.topic, tp.partition, self._position) for tp in tps]


def test_a_tail_without_records_ends_the_read_by_position() -> None:
    reader = FakeReader([FakeMessage("t", 0, 0, b"a"), FakeMessage("t", 0, 1, b"b")], high=5, position=5, flaky=2)
    got = list(topicreader.read_range(cast(Any, reader), "t", {0: 0}, idle_timeout=5))
    assert [m.value() for m in got] == [b"a", b"b"]


def test_a_read_that_cannot_reach_the_end_fails_instead_of_returning_part() -> None:
    reader = FakeReader([FakeMessage("t", 0, 0, b"a")], high=5, position=1)
    with pytest.raises(InfraUnavailable, match="Timed out"):
        list(topicreader.read_range(cast(Any, reader), "t", {0: 0}, idle_timeout=0.3))
