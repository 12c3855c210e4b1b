"""The shared read-to-end loop on an in-memory consumer: a compacted tail ends the read, a stuck one fails."""

from __future__ import annotations

from typing import Any, cast

import pytest

from reach import topicreader
from reach.errors import InfraUnavailable
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
