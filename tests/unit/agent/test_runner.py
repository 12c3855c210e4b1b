"""The runner's commit, rebalance and dead-letter paths on a fake consumer: asynchronous commits go out on a
short timer while revoke and shutdown commit at once, failed commits are sent again, a revoke waits for running
handlers only (backlog that never started is left uncommitted for the new owner), a registry outage reads the
record again instead of rejecting it, and a dead letter refused for good is written by reference."""

from __future__ import annotations

import queue
import time
from concurrent.futures import Future
from typing import Any

import pytest
from confluent_kafka import KafkaError, TopicPartition

from reach import dlq
from reach.agent import Agent
from reach.agent.exceptions import DeliveryFailed, RecordRefused
from reach.agent.outage import Outage
from reach.agent.runner import COMMIT_EVERY_S, Done, Runner
from reach.envelopes import new_envelope
from reach.kafka import avrogen, clients, codec
from reach.kafka import headers as h
from reach.kafka.headers import Headers
from reach.records import DeadLetter, Status
from reach.settings import KafkaSettings, ReachSettings, RedisSettings
from tests.unit.agent.fakes import FakeSender
from tests.unit.streams.kafka_fakes import FakeMessage


class FakeConsumer:
    def __init__(self) -> None:
        self.commits: list[list[tuple[int, int]]] = []
        self.synchronous: list[bool] = []  # per commit: whether the caller waited for the broker's answer
        self.unassigned: list[int] = []
        self.seeks: list[tuple[int, int]] = []
        self.paused = False
        self.owner: Runner | None = None

    def assignment(self) -> list[TopicPartition]:
        """What the group assigned: the partitions the runner owns (it keeps both in step)."""
        owner = self.owner
        return [] if owner is None else [TopicPartition(owner.inbox, p) for p in sorted(owner._owned)]

    def commit(self, *, offsets: list[TopicPartition], asynchronous: bool) -> list[TopicPartition] | None:
        self.commits.append([(tp.partition, tp.offset) for tp in offsets])
        self.synchronous.append(not asynchronous)
        return None if asynchronous else offsets

    def incremental_unassign(self, partitions: list[TopicPartition]) -> None:
        self.unassigned += [tp.partition for tp in partitions]

    def incremental_assign(self, _partitions: list[TopicPartition]) -> None: ...

    def seek(self, tp: TopicPartition) -> None:
        self.seeks.append((tp.partition, tp.offset))

    def pause(self, _partitions: list[TopicPartition]) -> None:
        self.paused = True

    def resume(self, _partitions: list[TopicPartition]) -> None:
        self.paused = False


class _Heartbeat:
    def beat(self, **_kwargs: Any) -> None: ...


class _Pipeline:
    lingering = 0


class _Loads:
    max_queue = 0


class _NoWaiting(queue.SimpleQueue[Done]):
    def get(self, block: bool = True, timeout: float | None = None) -> Done:
        if block:
            raise AssertionError("the revoke waited, but no handler was running on the revoked partition")
        return super().get(block, timeout)


def runner() -> tuple[Runner, FakeConsumer]:
    agent = Agent("agent://test/runner", instance_id="i-1")
    agent.capability("test.runner", version="1.0.0")(lambda p: p)
    r = Runner(agent, kafka=KafkaSettings(), redis=RedisSettings(), settings=ReachSettings())
    consumer = FakeConsumer()
    r._consumer = consumer  # type: ignore[assignment]
    consumer.owner = r
    r.heartbeat = _Heartbeat()  # type: ignore[assignment]
    r._pipeline = _Pipeline()  # type: ignore[assignment]
    r.loads = _Loads()  # type: ignore[assignment]
    r.publisher = FakeSender()  # type: ignore[assignment]
    return r, consumer


class _Clock:
    """The monotonic clock the commit timer reads (reach.kafka.clients), moved by the test."""

    def __init__(self) -> None:
        self.now = 1_000.0

    def monotonic(self) -> float:
        return self.now


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> _Clock:
    fake = _Clock()
    monkeypatch.setattr(clients, "time", fake)
    return fake


def answer(r: Runner, consumer: FakeConsumer) -> None:
    """The broker confirms the last commit."""
    clients.on_commit(r._ledger, None, [TopicPartition(r.inbox, p, o) for p, o in consumer.commits[-1]])


def test_a_failed_async_commit_is_sent_again_until_the_broker_confirms_it(clock: _Clock) -> None:
    r, consumer = runner()
    r._owned = {0}
    r._tracker.add(0, 5)
    r._tracker.done(0, 5)
    r._commit(asynchronous=True)
    r._commit(asynchronous=True)
    assert consumer.commits == [[(0, 6)]], "sent once while in flight"
    clients.on_commit(r._ledger, KafkaError(KafkaError.REQUEST_TIMED_OUT), [TopicPartition(r.inbox, 0, 6)])
    clock.now += COMMIT_EVERY_S
    r._commit(asynchronous=True)  # the partition is idle now: only the retry sends it
    assert consumer.commits == [[(0, 6)], [(0, 6)]]
    clients.on_commit(r._ledger, None, [TopicPartition(r.inbox, 0, 6)])
    clock.now += COMMIT_EVERY_S
    r._commit(asynchronous=True)
    assert consumer.commits == [[(0, 6)], [(0, 6)]]


def finish_every(r: Runner, consumer: FakeConsumer, clock: _Clock, step_s: float, turns: int) -> None:
    """A message of partition 0 acknowledged per loop turn, `step_s` apart; the broker answers every commit."""
    for offset in range(turns):
        r._tracker.add(0, offset)
        r._done.put(Done(0, offset))
        sent = len(consumer.commits)
        settle(r)
        if len(consumer.commits) > sent:
            answer(r, consumer)
        clock.now += step_s


def test_async_commits_go_out_on_a_short_timer_and_a_revoke_still_commits_at_once(clock: _Clock) -> None:
    r, consumer = runner()
    r._owned = {0, 1}
    step = COMMIT_EVERY_S * 0.3
    finish_every(r, consumer, clock, step, 10)
    assert consumer.commits == [[(0, 1)], [(0, 5)], [(0, 9)]], "one commit per timer, carrying the newest point"
    assert not any(consumer.synchronous)
    r._on_revoke(consumer, [TopicPartition(r.inbox, 0)])  # type: ignore[arg-type]
    assert consumer.commits[-1] == [(0, 10)] and consumer.synchronous[-1], "the timer is not up: committed anyway"


def test_a_shutdown_commits_what_finished_without_waiting_for_the_timer(clock: _Clock) -> None:
    r, consumer = runner()
    r._owned = {0}
    finish_every(r, consumer, clock, 0.0, 3)
    assert consumer.commits == [[(0, 1)]]
    r._drain()
    assert consumer.commits[-1] == [(0, 3)] and consumer.synchronous[-1]


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


def inbox_record(r: Runner, offset: int, value: bytes, partition: int = 0) -> Any:
    return FakeMessage(r.inbox, partition, offset, value, None, [(h.MESSAGE_ID, b"m-%d" % offset)])


def settle(r: Runner) -> None:
    """What the loop does between polls, minus handlers: apply completions, commit."""
    r._drain_done()
    r._commit(asynchronous=True)


def test_a_registry_outage_reads_the_record_again_after_a_backoff(monkeypatch: pytest.MonkeyPatch) -> None:
    r, consumer = runner()
    r._owned = {0}
    now = [0.0]
    r._registry = Outage(base_s=1.0, max_s=1.0, clock=lambda: now[0])
    good = codec.encode(new_envelope("test.runner", {}))
    down = [True]
    decode = avrogen.decode_dict  # what the inbox reads with (a Schema Registry's framing falls through to it)

    def registry(name: str, value: bytes) -> Any:
        if down[0]:
            raise codec.RegistryUnavailable("the registry did not answer")
        return decode(name, value)

    monkeypatch.setattr(avrogen, "decode_dict", registry)
    for offset in (0, 1):  # one batch: the second record waits behind the first
        r._take(inbox_record(r, offset, good))
    settle(r)
    assert consumer.seeks == [(0, 0)] and consumer.paused, "sought back to the record, inbox paused"
    assert not r._backlog and r.publisher.sent == [] and consumer.commits == [], "nothing REJECTED or committed"

    down[0] = False
    now[0] = 1.0  # past the backoff
    r._stalled.clear()  # the next batch
    r._flow()
    assert not consumer.paused
    r._take(inbox_record(r, 0, good))
    assert [msg.offset() for msg, _ in r._backlog] == [0], "read again, and this time handed to a handler"


def refusing(topic: str, too_large: bool) -> Any:
    def refuse(to: str, value: bytes | None) -> BaseException | None:
        if to == topic and codec.decode(value or b"", DeadLetter).envelope and too_large:
            return RecordRefused("Broker: Message size too large")
        return None
    return refuse


def test_a_dead_letter_refused_for_good_is_written_by_reference_and_the_instance_keeps_running() -> None:
    r, consumer = runner()
    r._owned = {0}
    r.publisher = FakeSender(refusing(r.names.dlq, too_large=True))  # type: ignore[assignment]
    r._take(inbox_record(r, 4, b"not an envelope"))
    settle(r)
    [sent] = r.publisher.on(r.names.dlq)
    letter = dlq.parse(0, 0, 0, sent.value or b"")
    assert letter is not None and letter.by_reference, "an empty envelope: replay reads the original at its origin"
    record = letter.record
    assert (record.origin_topic, record.origin_partition, record.origin_offset) == (r.inbox, 0, 4)
    assert record.reason == dlq.UNDECODABLE and record.message_id == "m-4"
    assert {rc.status for rc in r.publisher.receipts(r.names.receipts)} == {Status.REJECTED}
    assert consumer.commits == [[(0, 5)]], "the record is settled and its offset committed"
    assert not r._stop.is_set()


class _HeldSender:
    """Every send stays pending until the test resolves it, in the order it chooses."""

    def __init__(self) -> None:
        self.pending: dict[str, Future[Any]] = {}

    def send(self, topic: str, key: str, value: bytes | None, *, headers: Headers | None = None,
             partition: int | None = None) -> Future[Any]:
        self.pending[topic] = Future()
        return self.pending[topic]


def test_a_failed_dead_letter_ack_then_a_good_receipt_ack_leaves_the_offset_uncommitted() -> None:
    r, consumer = runner()
    r._owned = {0}
    sender = _HeldSender()
    r.publisher = sender  # type: ignore[assignment]
    r._take(inbox_record(r, 7, b"not an envelope"))
    assert set(sender.pending) == {r.names.dlq, r.names.receipts}
    sender.pending[r.names.dlq].set_exception(DeliveryFailed("Local: Message timed out"))
    sender.pending[r.names.receipts].set_result(None)  # the last ack is a good one
    settle(r)
    assert consumer.commits == [], "offset 7 stays uncommitted: its dead letter is not on the broker"
    assert r._stop.is_set(), "an outage stops the instance; the record is redelivered to the next owner"


class _Beats:
    def __init__(self) -> None:
        self.sent: list[list[int]] = []

    def beat(self, *, partitions: list[int], **_kwargs: Any) -> None:
        self.sent.append(partitions)


def test_losing_every_partition_keeps_naming_the_last_ones_until_the_next_assignment() -> None:
    r, consumer = runner()
    beats = _Beats()
    r.heartbeat = beats  # type: ignore[assignment]
    r._owned = {0, 1}
    r._on_lost(consumer, [TopicPartition(r.inbox, 1)])  # type: ignore[arg-type]
    assert beats.sent == [[0]], "a partial loss is published"
    r._on_lost(consumer, [TopicPartition(r.inbox, 0)])  # type: ignore[arg-type]
    r._on_assign(consumer, [])  # type: ignore[arg-type]  # the rejoin's empty first assignment
    assert beats.sent[1:] == [[0], [0]], "never no partition: the router would end messages NO_ROUTE"
    r._on_assign(consumer, [TopicPartition(r.inbox, 0), TopicPartition(r.inbox, 1)])  # type: ignore[arg-type]
    assert beats.sent[-1] == [0, 1]


def test_an_instance_left_without_partitions_says_so_after_two_session_timeouts() -> None:
    r, consumer = runner()
    beats = _Beats()
    r.heartbeat = beats  # type: ignore[assignment]
    r._on_assign(consumer, [TopicPartition(r.inbox, 0)])  # type: ignore[arg-type]
    r._on_lost(consumer, [TopicPartition(r.inbox, 0)])  # type: ignore[arg-type]
    r._empty_since = time.monotonic() - r._keep_named_s
    r._beat()
    assert beats.sent == [[0], [0], []]
