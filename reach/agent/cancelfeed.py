"""Follow `<ns>.cancels` into a CancelBook: from `window` ago (offsets for times), then tail it in a thread."""

from __future__ import annotations

import logging
import threading

from confluent_kafka import OFFSET_END, Consumer, KafkaException, TopicPartition

from reach import clients, topicreader
from reach.cancels import WINDOW_MS, BadCancel, CancelBook, decode
from reach.envelopes import now_ms
from reach.errors import ReachError
from reach.settings import KafkaSettings

log = logging.getLogger("reach.agent.cancels")
POLL_S = 0.2


class CancelFeed:
    """`book` answers from every cancel read so far; a missing topic only warns (no cancels then)."""

    def __init__(self, *, topic: str, kafka: KafkaSettings | None = None, window_ms: int = WINDOW_MS) -> None:
        self.topic = topic
        self.book = CancelBook(window_ms)
        self._kafka = kafka or KafkaSettings()
        self._window_ms = window_ms
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        try:
            consumer = self._open()
        except (KafkaException, ReachError) as exc:
            log.warning("cannot follow %s (%s): this instance will not see cancels. Run `reach topics apply`.",
                        self.topic, exc)
            return
        self._thread = threading.Thread(target=self._follow, args=(consumer,), name="reach-cancels", daemon=True)
        self._thread.start()

    def _open(self) -> Consumer:
        consumer = topicreader.open_reader("cancels", self._kafka)
        try:
            parts = topicreader.partitions(consumer, self.topic)
            since = now_ms() - self._window_ms
            starts = consumer.offsets_for_times([TopicPartition(self.topic, p, since) for p in parts], timeout=10)
            # no record since then: -1, i.e. the end (offsets_for_times says so with OFFSET_END)
            consumer.assign([TopicPartition(self.topic, tp.partition, tp.offset if tp.offset >= 0 else OFFSET_END)
                             for tp in starts])
        except BaseException:
            consumer.close()
            raise
        return consumer

    def _follow(self, consumer: Consumer) -> None:
        try:
            while not self._stop.is_set():
                for msg in clients.take(consumer, 500, POLL_S):
                    if msg.error():
                        continue
                    try:
                        self.book.add(decode(msg.value()), now_ms())
                    except BadCancel as exc:
                        log.warning("skipping %s[%d]@%d: %s", self.topic, msg.partition(), msg.offset(), exc)
        except KafkaException as exc:
            log.warning("stopped following %s: %s", self.topic, exc)
        finally:
            consumer.close()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
