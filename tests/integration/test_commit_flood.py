"""A consumer that commits after every record, at a few hundred records a second, on the real broker.

Unbounded asynchronous commits queue on the group coordinator's connection faster than the broker answers
them (each waits out `group.coordinator.append.linger.ms`); the heartbeats wait behind them, the session
expires and the consumer loses its partitions (decision 0024). With the commit ledger (one commit in flight
per consumer, reach.core.commits) the same consumer keeps its partitions, and its last commit lands.
"""

from __future__ import annotations

import functools
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pytest
from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.admin import NewTopic

from reach.core.commits import CommitLedger
from reach.kafka import clients
from reach.settings import KafkaSettings
from tests.integration.conftest import Infra

pytestmark = pytest.mark.serial  # the flood loads the broker's coordinator: alone, so no other test feels it

SESSION_MS = 6_000  # the router's and the status fold's
PARTITIONS = 4


@dataclass
class Membership:
    """What the group did to the consumer: assignments, and revokes or losses after the first assignment."""

    assigned: int = 0
    taken: list[float] = field(default_factory=list)  # when partitions were revoked or lost

    def on_assign(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        self.assigned += 1

    def on_taken(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        if partitions:
            self.taken.append(time.monotonic())


def test_unbounded_async_commits_lose_the_session(infra: Infra) -> None:
    """The reproduction: a commit per record, none awaited, at 1,000 records/s for 2 s, then none. The
    broker answers ~170 commits/s, so the heartbeats wait ~12 s behind the queue: longer than the session."""
    topic = _topic(infra, records=2_500)
    membership = Membership()
    consumer = _consumer(infra, topic, membership)

    def commit(msg: Any) -> None:
        consumer.commit(offsets=[TopicPartition(topic, msg.partition(), msg.offset() + 1)], asynchronous=True)

    try:
        read = _consume(consumer, membership, rate=1_000, seconds=2, commit=commit)
        deadline = time.monotonic() + 20
        while not membership.taken and time.monotonic() < deadline:  # no more commits: only the queue left
            consumer.poll(0.1)
        taken = list(membership.taken)  # before close(), which revokes everything
    finally:
        consumer.close()  # waits for the queued commits: shorter the fewer were queued
    assert read >= 1_500, f"only {read} records read in 2 s at 1,000/s"
    assert taken, (f"{read} unbounded async commits in 2 s did not cost the consumer its session within 20 s: "
                   "the broker answers commits faster than decision 0024 measured; check the mechanism")


def test_one_commit_in_flight_keeps_the_session_and_the_last_commit_lands(infra: Infra) -> None:
    """The fix, under the same flood: a commit point per record; the ledger sends one commit at a time."""
    topic = _topic(infra, records=20_000)
    membership = Membership()
    ledger = CommitLedger()
    consumer = _consumer(infra, topic, membership, on_commit=functools.partial(clients.on_commit, ledger))
    last: dict[int, int] = {}

    def commit(msg: Any) -> None:
        ledger.want({(topic, msg.partition()): msg.offset() + 1})
        last[msg.partition()] = msg.offset() + 1
        clients.send_commits(consumer, ledger)

    try:
        read = _consume(consumer, membership, rate=1_000, seconds=15, commit=commit)  # 2.5 sessions
        clients.commit_now(consumer, ledger)
        committed = {tp.partition: tp.offset for tp in
                     consumer.committed([TopicPartition(topic, p) for p in range(PARTITIONS)], timeout=10)}
        taken = list(membership.taken)  # before close(), which revokes everything
    finally:
        consumer.close()
    assert read > 12_000, f"only {read} records read in 15 s at 1,000/s"
    assert taken == [], f"the consumer lost its partitions {len(taken)} time(s)"
    assert membership.assigned == 1
    assert {p: o for p, o in committed.items() if p in last} == last, "the last commit of every partition landed"


def _topic(infra: Infra, *, records: int) -> str:
    topic = f"commitflood.{uuid.uuid4().hex[:10]}"
    admin = clients.admin(KafkaSettings.model_construct(bootstrap=infra.bootstrap))
    admin.create_topics([NewTopic(topic, num_partitions=PARTITIONS, replication_factor=1)])[topic].result(30)
    producer = clients.producer(KafkaSettings.model_construct(bootstrap=infra.bootstrap), **{"linger.ms": 20})
    for n in range(records):
        producer.produce(topic, value=b"x" * 100, key=str(n).encode())
        if n % 5_000 == 0:
            producer.poll(0)
    assert producer.flush(30) == 0
    return topic


def _consumer(infra: Infra, topic: str, membership: Membership, **conf: Any) -> Consumer:
    consumer = clients.consumer(f"commitflood.{uuid.uuid4().hex[:10]}",
                                KafkaSettings.model_construct(bootstrap=infra.bootstrap),
                                **{"session.timeout.ms": SESSION_MS, "heartbeat.interval.ms": 1_500, **conf})
    consumer.subscribe([topic], on_assign=membership.on_assign, on_revoke=membership.on_taken,
                       on_lost=membership.on_taken)
    return consumer


def _consume(consumer: Consumer, membership: Membership, *, rate: float, seconds: float,
             commit: Callable[[Any], None]) -> int:
    """Read one record at a time at `rate`, committing after each, for `seconds` after the first assignment."""
    deadline = time.monotonic() + 30
    while not membership.assigned:  # the join itself is not part of the flood
        consumer.poll(0.1)
        assert time.monotonic() < deadline, "no assignment in 30 s"
    start = time.monotonic()
    read = 0
    while time.monotonic() < start + seconds:
        msg = consumer.poll(0.05)
        if msg is None or msg.error():
            continue
        read += 1
        commit(msg)
        pause = start + read / rate - time.monotonic()
        if pause > 0:
            time.sleep(pause)
    return read
