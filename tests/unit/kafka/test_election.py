"""Group membership without reading (reach.kafka.election) on the in-memory bus: each member is handed the partitions
it owns, a second member takes some of them over, and the member holding partition 0 leads."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterator

import pytest

from reach.kafka import clients, memory
from reach.kafka.election import Election, Membership
from reach.settings import KafkaSettings


@pytest.fixture
def kafka() -> Iterator[KafkaSettings]:
    name = f"unit-{uuid.uuid4().hex[:8]}"
    memory.bus(name).create_topic("owned", 2)
    yield KafkaSettings(bootstrap=memory.SCHEME + name)
    memory.forget(name)


def _until(check: Callable[[], bool], serve: Callable[[], None], what: str) -> None:
    deadline = time.monotonic() + 5
    while not check():
        assert time.monotonic() < deadline, f"not within 5 s: {what}"
        serve()


def test_members_are_handed_their_partitions_and_a_second_member_takes_some_over(kafka: KafkaSettings) -> None:
    owned: dict[str, set[int]] = {"a": set(), "b": set()}

    def member(name: str) -> Membership:
        return Membership(group="g", topic="owned", kafka=kafka, on_assigned=owned[name].update,
                          on_revoked=lambda parts: owned[name].difference_update(parts))

    producer = clients.producer(kafka)
    for n in range(4):
        producer.produce("owned", b"x", key=b"k%d" % n)
    producer.flush(1)
    first = member("a")
    assert first.partitions() == [0, 1]
    _until(lambda: owned["a"] == {0, 1}, lambda: first.poll(0.01), "the first member owns both partitions")
    second = member("b")
    _until(lambda: owned["a"] and owned["b"] and not owned["a"] & owned["b"],
           lambda: (first.poll(0.01), second.poll(0.01)), "the partitions shared out")
    assert owned["a"] | owned["b"] == {0, 1}
    first.close()
    second.close()


def test_the_member_holding_partition_0_leads(kafka: KafkaSettings) -> None:
    election = Election(group="e", topic="owned", kafka=kafka)
    _until(lambda: election.leader, lambda: election.poll(0.01), "the only member leads")
    election.close()
    assert not election.leader
