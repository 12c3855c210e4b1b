"""In-memory stand-ins for the confluent-kafka consumer and producer, for failure-path unit tests of shells."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from confluent_kafka import KafkaError, KafkaException, TopicPartition


@dataclass
class FakeMessage:
    """What a consumer returns: a record at a topic/partition/offset."""

    _topic: str
    _partition: int
    _offset: int
    _value: bytes | None
    _key: bytes | None = None
    _headers: list[tuple[str, bytes]] | None = None

    def topic(self) -> str:
        return self._topic

    def partition(self) -> int:
        return self._partition

    def offset(self) -> int:
        return self._offset

    def value(self) -> bytes | None:
        return self._value

    def key(self) -> bytes | None:
        return self._key

    def headers(self) -> list[tuple[str, bytes]] | None:
        return self._headers

    def error(self) -> None:
        return None

    def timestamp(self) -> tuple[int, int]:
        return (1, 0)


@dataclass
class FakeConsumer:
    """Records commits, seeks and pauses; `answer()` delivers the broker's answer to the unanswered commits."""

    commits: list[TopicPartition] = field(default_factory=list)
    seeks: list[TopicPartition] = field(default_factory=list)
    paused: list[TopicPartition] = field(default_factory=list)
    assigned: set[tuple[str, int]] = field(default_factory=set)
    _unanswered: list[TopicPartition] = field(default_factory=list)

    def commit(self, *, offsets: list[TopicPartition], asynchronous: bool = True) -> None:
        self.commits.extend(offsets)
        self._unanswered.extend(offsets)

    def assignment(self) -> list[TopicPartition]:
        return [TopicPartition(t, p) for t, p in sorted(self.assigned)]

    def answer(self, on_commit: Callable[[KafkaError | None, list[TopicPartition]], None],
               err: KafkaError | None = None) -> None:
        """What poll() does with the results of the commits sent since the last answer."""
        answered, self._unanswered = self._unanswered, []
        on_commit(err, answered)

    def seek(self, tp: TopicPartition) -> None:
        self.seeks.append(tp)

    def position(self, tps: list[TopicPartition]) -> list[TopicPartition]:
        return [TopicPartition(tp.topic, tp.partition, -1001) for tp in tps]  # nothing fetched: never level

    def get_watermark_offsets(self, tp: TopicPartition, cached: bool = False, timeout: float = 0) -> tuple[int, int]:
        return 0, -1001

    def pause(self, tps: list[TopicPartition]) -> None:
        self.paused.extend(tps)

    def committed_at(self) -> dict[tuple[str, int], int]:
        return {(tp.topic, tp.partition): tp.offset for tp in self.commits}


@dataclass
class FakeProducer:
    """Delivers on flush; `refuse(topic, value) -> KafkaError | None` decides per record, `hold` keeps it queued."""

    refuse: Callable[[str, bytes], KafkaError | None] = lambda _t, _v: None
    hold: Callable[[str], bool] = lambda _t: False
    raise_on: Callable[[str, bytes], BaseException | None] = lambda _t, _v: None
    sent: list[tuple[str, bytes, Any]] = field(default_factory=list)
    sent_headers: list[tuple[str, Any]] = field(default_factory=list)  # (topic, headers) of each record sent
    _queue: list[tuple[str, bytes, Any, Callable[..., None], Any, int]] = field(default_factory=list)
    _offsets: dict[tuple[str, int], int] = field(default_factory=dict)

    def produce(self, topic: str, value: bytes, key: Any = None, headers: Any = None,
                on_delivery: Callable[..., None] | None = None, partition: int | None = None) -> None:
        exc = self.raise_on(topic, value)
        if exc is not None:
            raise exc
        self._queue.append((topic, value, key, on_delivery or (lambda *_: None), headers, partition or 0))

    def flush(self, _timeout: float = 0) -> int:
        while True:
            ready = [q for q in self._queue if not self.hold(q[0])]
            if not ready:
                return len(self._queue)
            for item in ready:
                self._queue.remove(item)
                topic, value, key, report, hdrs, partition = item
                err = self.refuse(topic, value)
                offset = 0
                if err is None:
                    self.sent.append((topic, value, key))
                    self.sent_headers.append((topic, hdrs))
                    offset = self._offsets.get((topic, partition), 0)
                    self._offsets[topic, partition] = offset + 1
                report(err, _Delivered(topic, key, partition, offset))

    def poll(self, _timeout: float = 0) -> int:
        return 0

    def to(self, topic: str) -> list[bytes]:
        return [v for t, v, _ in self.sent if t == topic]


class _Delivered:
    def __init__(self, topic: str, key: Any = None, partition: int = 0, offset: int = 0) -> None:
        self._topic = topic
        self._key = key
        self._partition = partition
        self._offset = offset

    def key(self) -> Any:
        return self._key

    def topic(self) -> str:
        return self._topic

    def partition(self) -> int:
        return self._partition

    def offset(self) -> int:
        return self._offset


class FakeReader:
    """An assign()-only reader: serves `records` once; watermarks (low, high) fail `flaky` times first, or always
    with `watermark_error`; the position after the records is `position`."""

    def __init__(self, records: list[FakeMessage], *, low: int = 0, high: int = 10, position: int = 0,
                 flaky: int = 0, watermark_error: BaseException | None = None) -> None:
        self.records, self.low, self.high, self._position = records, low, high, position
        self.flaky, self.watermark_error = flaky, watermark_error

    def get_watermark_offsets(self, _tp: Any, timeout: float = 0) -> tuple[int, int]:
        if self.watermark_error is not None:
            raise self.watermark_error
        if self.flaky:
            self.flaky -= 1
            raise KafkaException(KafkaError(KafkaError.NOT_LEADER_FOR_PARTITION))
        return self.low, self.high

    def assign(self, _tps: Any) -> None:
        pass

    def poll(self, _timeout: float) -> FakeMessage | None:
        return self.records.pop(0) if self.records else None

    def consume(self, _n: int, _timeout: float) -> list[FakeMessage]:
        out, self.records = self.records, []
        return out

    def position(self, tps: list[TopicPartition]) -> list[TopicPartition]:
        return [TopicPartition(tp.topic, tp.partition, self._position) for tp in tps]

    def close(self) -> None:
        pass


@dataclass
class Settled:
    """What one batch through a worker's `process` settled: its commit points, and where it was read again from."""

    committed: dict[tuple[str, int], int]
    consumer: FakeConsumer

    def commits(self) -> dict[tuple[str, int], int]:
        return self.committed

    def rewinds(self) -> dict[tuple[str, int], int]:
        return {(tp.topic, tp.partition): tp.offset for tp in self.consumer.seeks}


def settle(worker: Any, messages: list[Any], producer: Any) -> Settled:
    """Hand one batch to a worker's `process` (reach.kafka.worker), as its loop does, with a fake consumer."""
    consumer = FakeConsumer()
    return Settled(worker.process(messages, consumer=consumer, producer=producer), consumer)


def fold_batch(fold: Any, consumer: Any, producer: Any, messages: Any) -> dict[tuple[str, int], int]:
    """One batch of a status fold as the worker's loop runs it (reach.kafka.worker): `process`, then the commit of
    what it acknowledged. A fake producer with `list_topics` answers the fold's metadata lookups too."""
    if hasattr(producer, "list_topics"):
        fold._admin = producer
    commits: dict[tuple[str, int], int] = fold.process(messages, consumer=consumer, producer=producer)
    if commits:
        consumer.commit(offsets=[TopicPartition(t, p, o) for (t, p), o in commits.items()], asynchronous=True)
    return commits
