"""The in-memory producer (reach.kafka.memory): murmur2 placement, delivery reports served by poll and flush."""

from __future__ import annotations

import random
import threading
import time
from collections import deque
from collections.abc import Callable
from typing import Any

from confluent_kafka import KafkaError, Message

from reach.kafka.memory.bus import Bus, ClusterMetadata, Record, as_bytes, as_headers

Callback = Callable[..., Any]


class MemoryProducer:
    """produce / poll / flush / list_topics of confluent_kafka.Producer; reports are served by poll and flush."""

    def __init__(self, bus: Bus, conf: dict[str, Any]) -> None:
        self._bus = bus
        self._max_bytes = int(conf.get("message.max.bytes", 1_000_000))
        self._reports: deque[tuple[Callback, KafkaError | None, Message]] = deque()
        self._lock = threading.Lock()
        self._rng = random.Random()
        from aiokafka.partitioner import murmur2  # Java's murmur2, as librdkafka's murmur2_random; imported on use

        self._murmur2 = murmur2

    def produce(self, topic: str, value: str | bytes | None = None, key: str | bytes | None = None,
                partition: int = -1, on_delivery: Callback | None = None, timestamp: int = 0,
                headers: Any = None, callback: Callback | None = None) -> None:
        key_b, value_b, hdrs = as_bytes(key), as_bytes(value), as_headers(headers)
        count = self._bus.partitions(topic)
        error: KafkaError | None = None
        offset = -1
        if count == 0:
            error = KafkaError(KafkaError.UNKNOWN_TOPIC_OR_PART, f"unknown topic {topic}")
        elif partition >= count:
            error = KafkaError(KafkaError._UNKNOWN_PARTITION, f"{topic} has {count} partitions")
        elif len(value_b or b"") + len(key_b or b"") > self._max_bytes:
            error = KafkaError(KafkaError.MSG_SIZE_TOO_LARGE)
        else:
            if partition < 0:
                partition = ((self._murmur2(key_b) & 0x7FFFFFFF) % count if key_b is not None
                             else self._rng.randrange(count))
            offset = self._bus.append(topic, partition, Record(key_b, value_b, hdrs,
                                                                timestamp or int(time.time() * 1000)))
        report = on_delivery or callback
        if report is not None:
            msg = Message(topic=topic, partition=max(partition, 0), offset=offset, key=key_b, value=value_b,
                          headers=hdrs, error=error)
            with self._lock:
                self._reports.append((report, error, msg))

    def poll(self, timeout: float | None = None) -> int:
        served = 0
        while True:
            with self._lock:
                if not self._reports:
                    return served
                report, error, msg = self._reports.popleft()
            report(error, msg)
            served += 1

    def flush(self, timeout: float | None = None) -> int:
        self.poll(0)
        return 0

    def __len__(self) -> int:
        return len(self._reports)

    def list_topics(self, topic: str | None = None, timeout: float = -1) -> ClusterMetadata:
        return self._bus.metadata(topic)
