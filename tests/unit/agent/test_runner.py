"""The runner's commit and rebalance paths on a fake consumer: failed commits are sent again, and a revoke
waits for running handlers only (backlog that never started is left uncommitted for the new owner)."""

from __future__ import annotations

import queue
from typing import Any

from confluent_kafka import KafkaError, TopicPartition

from reach.agent import Agent
from reach.agent.runner import Done, Runner


class FakeConsumer:
    def __init__(self) -> None:
        self.commits: list[list[tuple[int, int]]] = []
        self.unassigned: list[int] = []

    def commit(self, *, offsets: list[TopicPartition], asynchronous: bool) -> list[TopicPartition] | None:
        self.commits.append([(tp.partition, tp.offset) for tp in offsets])
        return None if asynchronous else offsets

    def incremental_unassign(self, partitions: list[TopicPartition]) -> None:
        self.unassigned += [tp.partition for tp in partitions]

    def pause(self, _partitions: list[TopicPartition]) -> None: ...

    def resume(self, _partitions: list[TopicPartition]) -> None: ...


class _Heartbeat:
    def beat(self, **_kwargs: Any) -> None: ...


class _Pipeline:
    lingering = 0


class _NoWaiting(queue.SimpleQueue[Done]):
    def get(self, block: bool = True, timeout: float | None = None) -> Done:
        if block:
            raise AssertionError("the revoke waited, but no handler was running on the revoked partition")
        return super().get(block, timeout)


def runner() -> tuple[Runner, FakeConsumer]:
    agent = Agent("agent://test/runner", instance_id="i-1")
    agent.capability("test.runner", version="1.0.0")(lambda p: p)
    r = Runner(agent)
    consumer = FakeConsumer()
    r._consumer = consumer  # type: ignore[assignment]
    r.heartbeat = _Heartbeat()  # type: ignore[assignment]
    r._pipeline = _Pipeline()  # type: ignore[assignment]
    return r, consumer


def test_a_failed_async_commit_is_sent_again_until_the_broker_confirms_it() -> None:
    r, consumer = runner()
    r._owned = {0}
    r._tracker.add(0, 5)
    r._tracker.done(0, 5)
    r._commit(asynchronous=True)
    r._commit(asynchronous=True)
    assert consumer.commits == [[(0, 6)]], "sent once while in flight"
    r._on_commit(KafkaError(KafkaError.REQUEST_TIMED_OUT), [TopicPartition(r.inbox, 0, 6)])
    r._commit(asynchronous=True)  # the partition is idle now: only the retry sends it
    assert consumer.commits == [[(0, 6)], [(0, 6)]]
    r._on_commit(None, [TopicPartition(r.inbox, 0, 6)])
    r._commit(asynchronous=True)
    assert consumer.commits == [[(0, 6)], [(0, 6)]]


def test_a_revoke_with_only_backlog_does_not_wait_and_commits_only_what_finished() -> None:
    r, consumer = runner()
    r._owned = {1, 2}
    r._done = _NoWaiting()
    r._tracker.add(1, 0)
    r._tracker.done(1, 0)  # finished and acknowledged
    r._tracker.add(1, 1)  # read, never started (backlog)
    r._backlog.append((_Msg(1, 1), None))  # type: ignore[arg-type]
    r._on_revoke(consumer, [TopicPartition(r.inbox, 1)])  # type: ignore[arg-type]
    assert consumer.commits == [[(1, 1)]], "offset 0 committed; the backlog offset 1 is left for the new owner"
    assert consumer.unassigned == [1] and r._owned == {2} and not r._backlog


class _Msg:
    def __init__(self, partition: int, offset: int) -> None:
        self._p, self._o = partition, offset

    def partition(self) -> int:
        return self._p

    def offset(self) -> int:
        return self._o
