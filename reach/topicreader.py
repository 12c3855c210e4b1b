"""Read a topic from given offsets up to its end at call time (no consumer group, no commits)."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator

from confluent_kafka import OFFSET_END, Consumer, Message, TopicPartition

from reach import clients
from reach.errors import ReachError
from reach.settings import KafkaSettings


def open_reader(purpose: str, kafka: KafkaSettings | None = None) -> Consumer:
    """A consumer used only through assign(); the group id is never joined or committed."""
    return clients.consumer(f"reach-reader.{purpose}.{uuid.uuid4().hex[:8]}", kafka)


def start_offsets(consumer: Consumer, topic: str, since_ms: int | None, timeout: float = 10.0) -> dict[int, int]:
    """Per partition, the first offset whose timestamp is >= since_ms (the beginning when None)."""
    meta = consumer.list_topics(topic, timeout=timeout).topics.get(topic)
    if meta is None or meta.error is not None:
        raise ReachError(f"Topic {topic} does not exist. Run `reach topics apply` or check REACH_NAMESPACE.")
    parts = sorted(meta.partitions)
    if since_ms is None:
        return {p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=timeout)[0] for p in parts}
    found = consumer.offsets_for_times([TopicPartition(topic, p, since_ms) for p in parts], timeout=timeout)
    ends = {p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=timeout)[1] for p in parts}
    return {tp.partition: ends[tp.partition] if tp.offset in (-1, OFFSET_END) else tp.offset for tp in found}


def read_range(consumer: Consumer, topic: str, starts: dict[int, int], *, until_ms: int | None = None,
               idle_timeout: float = 10.0) -> Iterator[Message]:
    """Records from `starts` to the end offsets seen now (and before until_ms, by broker timestamp)."""
    ends = {p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=idle_timeout)[1] for p in starts}
    todo = {p for p in starts if starts[p] < ends[p]}
    if not todo:
        return
    consumer.assign([TopicPartition(topic, p, starts[p]) for p in todo])
    idle_until = time.monotonic() + idle_timeout
    while todo and time.monotonic() < idle_until:  # the idle bound covers tail offsets that hold no record
        for msg in clients.take(consumer, 1000, 0.5):
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
