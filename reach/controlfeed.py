"""A continuous follower of the compacted control topic: reads it to its end once, then tails it in a thread.

The SDK (its own DRAIN / DISABLE, the POLICY of its capabilities) and the client (POLICY at send time) read
the ControlView this keeps current; a record reaches them within one poll (`poll_s`), not on a re-read cycle.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Protocol

from reach.control import apply_record
from reach.core.views.controlview import ControlView
from reach.kafka import clients, topicreader
from reach.kafka.codec import RegistryUnavailable
from reach.kafka.types import OFFSET_BEGINNING, Consumer, TopicPartition
from reach.names import Names
from reach.settings import KafkaSettings

log = logging.getLogger("reach.control")
POLL_S = 0.2


class ControlSource(Protocol):
    """Something that keeps a ControlView current: a ControlFeed, or a test's in-memory fake."""

    view: ControlView

    def start(self, timeout: float = 10.0) -> None: ...

    def stop(self) -> None: ...


class ControlFeed:
    """`view` answers from everything read so far; `start()` returns once the topic was read to its end."""

    def __init__(self, *, names: Names, kafka: KafkaSettings, poll_s: float = POLL_S) -> None:
        self._names = names
        self._kafka = kafka
        self._poll_s = poll_s
        self.view = ControlView()
        self._stop = threading.Event()
        self._consumer: Consumer | None = None
        self._thread: threading.Thread | None = None

    def start(self, timeout: float = 10.0) -> None:
        """Assign every partition from the beginning, read up to the end offsets of now, then follow."""
        consumer = topicreader.open_reader("control-feed", self._kafka, profile="idle")
        try:
            topic = self._names.control
            parts = topicreader.partitions(consumer, topic, timeout)
            ends = {p: topicreader.watermarks(consumer, topic, p, timeout)[1] for p in parts}
            consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in parts])
            deadline = time.monotonic() + timeout
            while not self._caught_up(consumer, ends) and time.monotonic() < deadline:
                self._poll(consumer)
            if not self._caught_up(consumer, ends):
                log.warning("the control topic was not read to its end within %.0fs; following it from here", timeout)
        except Exception:
            consumer.close()
            raise
        self._consumer = consumer
        self._thread = threading.Thread(target=self._follow, name="reach-control-feed", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=2 * self._poll_s + 5)

    def _caught_up(self, consumer: Consumer, ends: dict[int, int]) -> bool:
        positions = consumer.position([TopicPartition(self._names.control, p) for p in ends])
        return all(ends[tp.partition] == 0 or tp.offset >= ends[tp.partition] for tp in positions)

    def _follow(self) -> None:
        consumer = self._consumer
        assert consumer is not None
        try:
            while not self._stop.is_set():
                try:
                    self._poll(consumer)
                except Exception as exc:  # noqa: BLE001 - a registry or broker blip: the last view stays in force
                    log.warning("control feed: %s; trying again", exc)
                    self._stop.wait(1.0)
        finally:
            consumer.close()

    def _poll(self, consumer: Consumer) -> None:
        batch = [m for m in clients.take(consumer, 500, self._poll_s) if not m.error()]
        for i, msg in enumerate(batch):
            try:
                apply_record(self.view, msg.key(), msg.value(),
                             where=f"{msg.topic()}[{msg.partition()}]@{msg.offset()}")
            except RegistryUnavailable:
                # not these records' fault: read them again after the caller's pause instead of losing them
                firsts: dict[int, int] = {}
                for rest in batch[i:]:
                    firsts.setdefault(rest.partition() or 0, rest.offset() or 0)
                for partition, offset in firsts.items():
                    consumer.seek(TopicPartition(self._names.control, partition, offset))
                raise
