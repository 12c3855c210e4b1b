"""Follow `<ns>.cancels` into a CancelBook: from `window` ago (offsets for times), then tail it in a thread.

`start()` returns once the cancels already in the topic are read (up to its end offsets of that moment), so
the agent subscribes its inbox knowing them: a message whose cancel landed before the instance started is
not run. The start offsets are concrete (a logical end would resolve later and skip a cancel produced in
between). A broker that cannot be read, or a missing topic, does not stop the agent: the feed warns and opens
again every RETRY_S until it can follow."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from confluent_kafka import Consumer, KafkaException, TopicPartition

from reach.cancels import WINDOW_MS, BadCancel, CancelBook, decode
from reach.envelopes import now_ms
from reach.errors import ReachError, TopicMissing
from reach.kafka import clients, topicreader
from reach.settings import KafkaSettings

log = logging.getLogger("reach.agent.cancels")
POLL_S = 0.2
RETRY_S = 5.0


class CancelFeed:
    """`book` answers from every cancel read so far; `caught_up` is set once the topic was read to its end."""

    def __init__(self, *, topic: str, kafka: KafkaSettings, window_ms: int = WINDOW_MS,
                 retry_s: float = RETRY_S, open_reader: Callable[[], Consumer] | None = None) -> None:
        self.topic = topic
        self.book = CancelBook(window_ms)
        self.caught_up = threading.Event()
        self._open_reader = open_reader or (lambda: topicreader.open_reader("cancels", kafka, profile="idle"))
        self._window_ms = window_ms
        self._retry_s = retry_s
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self, timeout: float = 10.0) -> None:
        """Follow on a thread; return once caught up, or after `timeout` with a warning."""
        self._thread = threading.Thread(target=self._run, name="reach-cancels", daemon=True)
        self._thread.start()
        if not self.caught_up.wait(timeout):
            log.warning("%s was not read to its end within %.0fs: a cancel sent before this instance started may "
                        "be missed until it is", self.topic, timeout)

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)

    def _run(self) -> None:
        warned = False
        while not self._stop.is_set():
            try:
                consumer, ends = self._open()
            except (KafkaException, ReachError) as exc:
                if isinstance(exc, TopicMissing):
                    self.caught_up.set()  # no topic: no cancel to wait for (a broker in trouble is waited for)
                if not warned:
                    log.warning("cannot follow %s (%s): this instance does not see cancels until it can; trying "
                                "again every %.0fs. Run `reach topics apply` if the topic is missing.",
                                self.topic, exc, self._retry_s)
                    warned = True
                self._stop.wait(self._retry_s)
                continue
            if warned:
                log.info("following %s again", self.topic)
                warned = False
            try:
                self._follow(consumer, ends)
            except KafkaException as exc:
                log.warning("following %s failed (%s); opening it again", self.topic, exc)
                self._stop.wait(self._retry_s)
            finally:
                consumer.close()

    def _open(self) -> tuple[Consumer, dict[tuple[str, int], int]]:
        consumer = self._open_reader()
        try:
            starts = topicreader.start_offsets(consumer, self.topic, now_ms() - self._window_ms)
            ends = {p: topicreader.watermarks(consumer, self.topic, p)[1] for p in starts}
            consumer.assign([TopicPartition(self.topic, p, offset) for p, offset in starts.items()])
        except BaseException:
            consumer.close()
            raise
        return consumer, {(self.topic, p): end for p, end in ends.items() if starts[p] < end}  # what there is to read

    def _follow(self, consumer: Consumer, ends: dict[tuple[str, int], int]) -> None:
        while not self._stop.is_set():
            batch = clients.take(consumer, 500, POLL_S)
            for msg in batch:
                if msg.error():
                    continue
                try:
                    self.book.add(decode(msg.value()), now_ms())
                except BadCancel as exc:
                    log.warning("skipping %s[%d]@%d: %s", self.topic, msg.partition(), msg.offset(), exc)
            if not self.caught_up.is_set() and not topicreader.unread(consumer, ends):
                self.caught_up.set()

