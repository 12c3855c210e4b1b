"""Read a topic from given offsets up to its end at call time (no consumer group, no commits).

Every read-to-end loop of Reach goes through here: the registry and control readers, `dlq ls`,
`receipts sql`. A fresh topic may not have a leader yet (NOT_LEADER), so watermark queries retry
until the timeout; a read that cannot reach the end in time raises InfraUnavailable instead of
returning a partial view.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterator
from enum import Enum
from typing import TypeVar

from confluent_kafka import OFFSET_END, Consumer, KafkaError, KafkaException, Message, TopicPartition

from reach.errors import InfraUnavailable, TopicMissing
from reach.kafka import clients
from reach.settings import ConsumerProfile, KafkaSettings

T = TypeVar("T")


def open_reader(purpose: str, kafka: KafkaSettings, *, profile: ConsumerProfile = "hot") -> Consumer:
    """A consumer used only through assign(); the group id is never joined or committed."""
    return clients.consumer(f"reach-reader.{purpose}.{uuid.uuid4().hex[:8]}", kafka, profile=profile)


class Missing(Enum):
    """Why `read_one` returned no record."""

    GONE = "gone"        # below the log start (retention) or the partition no longer exists: it never comes back
    PENDING = "pending"  # not read in time (leader move, busy broker): try again later


def read_one(purpose: str, kafka: KafkaSettings, at: tuple[str, int, int]) -> bytes | None | Missing:
    """The record at (topic, partition, offset) (None for a tombstone), GONE when it can never be read, PENDING
    when it was not read in time (the timekeeper's reroute, the status fold's fallback)."""
    topic, partition, offset = at
    reader = open_reader(purpose, kafka)
    try:
        reader.assign([TopicPartition(topic, partition, offset)])
        for _ in range(20):
            for msg in clients.take(reader, 10, 0.25):
                if not msg.error() and msg.offset() == offset:
                    return msg.value()
        try:
            low, _high = reader.get_watermark_offsets(TopicPartition(topic, partition), timeout=5)
        except KafkaException as exc:
            if exc.args and exc.args[0].code() in (KafkaError.UNKNOWN_TOPIC_OR_PART, KafkaError._UNKNOWN_TOPIC,
                                                   KafkaError._UNKNOWN_PARTITION):
                return Missing.GONE
            return Missing.PENDING
        # at or past the high watermark is not gone: right after a leader change the new leader's high
        # watermark can lag the offset it already acknowledged; the caller's deadline bounds the retries
        return Missing.GONE if offset < low else Missing.PENDING
    finally:
        reader.close()


_NOT_LED = frozenset({KafkaError.NOT_LEADER_FOR_PARTITION, KafkaError.LEADER_NOT_AVAILABLE,
                      KafkaError.UNKNOWN_TOPIC_OR_PART, KafkaError.OFFSET_NOT_AVAILABLE, KafkaError._TIMED_OUT,
                      KafkaError._TRANSPORT, KafkaError._ALL_BROKERS_DOWN, KafkaError._UNKNOWN_PARTITION})
"""A partition whose leader is not known yet or not reachable: waited out, like any error librdkafka calls
retriable. Any other (authorization, a bad request) is final at once."""


def _until_led(query: Callable[[float], T], what: str, timeout: float) -> T:
    """query(seconds left), retried while a partition has no known leader yet (NOT_LEADER on a fresh topic)."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            return query(max(0.5, deadline - time.monotonic()))
        except KafkaException as exc:
            err = exc.args[0]
            if not (err.retriable() or err.code() in _NOT_LED):
                raise InfraUnavailable(f"Cannot read {what}: {err.str()}") from None
            if time.monotonic() >= deadline:
                raise InfraUnavailable(f"Cannot read {what}: {exc.args[0].str()}; is the broker up?") from None
            time.sleep(0.1)


def watermarks(consumer: Consumer, topic: str, partition: int, timeout: float = 10.0) -> tuple[int, int]:
    """(low, high) of one partition, retrying while the partition has no known leader yet."""
    low, high = _until_led(lambda left: consumer.get_watermark_offsets(TopicPartition(topic, partition), timeout=left),
                           f"the end of {topic}[{partition}]", timeout)
    return low, high


def partitions(consumer: Consumer, topic: str, timeout: float = 10.0) -> list[int]:
    """The topic's partitions; TopicMissing (a ReachError) naming the fix when the topic does not exist."""
    meta = consumer.list_topics(topic, timeout=timeout).topics.get(topic)
    if meta is None or meta.error is not None or not meta.partitions:
        raise TopicMissing(f"Topic {topic} does not exist. Run `reach topics apply` or check REACH_NAMESPACE.")
    return sorted(meta.partitions)


def start_offsets(consumer: Consumer, topic: str, since_ms: int | None, timeout: float = 10.0) -> dict[int, int]:
    """Per partition, the first offset whose timestamp is >= since_ms (the beginning when None).

    A partition with no such record yet starts at its end as read *before* the lookup by time: a record that
    lands between the two queries is then read, not skipped."""
    parts = partitions(consumer, topic, timeout)
    if since_ms is None:
        return {p: watermarks(consumer, topic, p, timeout)[0] for p in parts}
    ends = {p: watermarks(consumer, topic, p, timeout)[1] for p in parts}

    def by_time(left: float) -> list[TopicPartition]:
        found = consumer.offsets_for_times([TopicPartition(topic, p, since_ms) for p in parts], timeout=left)
        for tp in found:
            if tp.error is not None:  # one partition's error comes back on its entry, not raised
                raise KafkaException(tp.error)
        return found

    found = _until_led(by_time, f"the offsets of {topic} by time", timeout)
    return {tp.partition: ends[tp.partition] if tp.offset in (-1, OFFSET_END) else tp.offset for tp in found}


def unread(consumer: Consumer, ends: dict[tuple[str, int], int]) -> dict[tuple[str, int], int]:
    """Of `ends` ((topic, partition) -> an end offset), those the consumer's position has not reached (a local
    call: checked after every batch, so steady traffic cannot keep a reader from seeing it caught up)."""
    if not ends:
        return {}
    return {(tp.topic, tp.partition): ends[(tp.topic, tp.partition)]
            for tp in consumer.position([TopicPartition(t, p) for t, p in ends])
            if tp.offset < ends[(tp.topic, tp.partition)]}


def read_range(consumer: Consumer, topic: str, starts: dict[int, int], *, until_ms: int | None = None,
               idle_timeout: float = 10.0, stops: dict[int, int] | None = None) -> Iterator[Message]:
    """Records from `starts` to the end offsets seen now (and before until_ms, by broker timestamp; and before
    `stops`, per partition, when given).

    A partition is done at its last record, or when idle with its position at or past the end (the tail
    of a compacted topic may hold no record). InfraUnavailable after `idle_timeout` without progress."""
    ends = {p: watermarks(consumer, topic, p, idle_timeout)[1] for p in starts}
    if stops is not None:
        ends = {p: min(end, stops.get(p, end)) for p, end in ends.items()}
    todo = {p for p in starts if starts[p] < ends[p]}
    if not todo:
        return
    consumer.assign([TopicPartition(topic, p, starts[p]) for p in todo])
    idle_until = time.monotonic() + idle_timeout
    while todo:
        batch = clients.take(consumer, 1000, 0.5)
        if not batch:
            for tp in consumer.position([TopicPartition(topic, p) for p in todo]):
                if tp.offset >= ends[tp.partition]:
                    todo.discard(tp.partition)
            if todo and time.monotonic() >= idle_until:
                raise InfraUnavailable(f"Timed out after {idle_timeout:.0f}s reading {topic} to its end "
                                       f"(partitions {sorted(todo)} left); is the broker busy?")
            continue
        for msg in batch:
            part, offset = msg.partition(), msg.offset()
            if msg.error() or part is None or offset is None or part not in todo:
                continue
            idle_until = time.monotonic() + idle_timeout
            if offset >= ends[part] - 1:
                todo.discard(part)
            if offset >= ends[part] or (until_ms is not None and msg.timestamp()[1] >= until_ms):
                todo.discard(part)
                continue
            yield msg



def latest_records(purpose: str, topic: str, decode: Callable[[bytes], T], kafka: KafkaSettings, *,
                   skip: tuple[type[Exception], ...] = (ValueError,), idle_timeout: float = 5.0) -> dict[str, T]:
    """A compacted topic read to its end: the latest record per key, decoded (a tombstone removes its key; a
    record `decode` refuses with one of `skip` is passed over, so its key keeps the record before it)."""
    reader = open_reader(purpose, kafka)
    found: dict[str, T] = {}
    try:
        starts = start_offsets(reader, topic, None)
        for msg in read_range(reader, topic, starts, idle_timeout=idle_timeout):
            key, value = (msg.key() or b"").decode(errors="replace"), msg.value()
            if value is None:
                found.pop(key, None)
                continue
            try:
                found[key] = decode(value)
            except skip:
                continue
    finally:
        reader.close()
    return found
