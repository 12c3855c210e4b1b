"""Follow `<ns>.cancels` into a CancelBook and, with `control_topic`, the control topic into a ControlView: one
consumer for both (decision 0044), tailed in a thread.

Cancels are read from `window` ago (offsets for times), the compacted control topic from its beginning.
`start()` returns once what both held is read (up to their end offsets of that moment), so the agent subscribes
its inbox knowing them: a message whose cancel landed before the instance started is not run, and its policies
and its own DRAIN / DISABLE are in force. The start offsets are concrete (a logical end would resolve later and
skip a record produced in between). A broker that cannot be read, or a missing topic, does not stop the agent:
the feed warns and opens again every RETRY_S until it can follow (a missing topic: the others are followed
meanwhile). A Schema Registry outage while a control record decodes reads that record again after a pause."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

from reach.cancels import WINDOW_MS, BadCancel, CancelBook, decode
from reach.control import apply_record
from reach.core.views.controlview import ControlView
from reach.envelopes import now_ms
from reach.errors import ReachError, TopicMissing
from reach.kafka import clients, topicreader
from reach.kafka.codec import RegistryUnavailable
from reach.kafka.types import Consumer, KafkaException, Message, TopicPartition
from reach.settings import KafkaSettings

log = logging.getLogger("reach.agent.cancels")
POLL_S = 0.2
RETRY_S = 5.0
REGISTRY_PAUSE_S = 1.0


class CancelFeed:
    """`book` answers from every cancel read so far, `view` from every control record (with `control_topic`);
    `caught_up` is set once the topics were read to their ends. A ControlSource for the agent's AgentControl."""

    def __init__(self, *, topic: str, kafka: KafkaSettings, control_topic: str | None = None,
                 window_ms: int = WINDOW_MS, retry_s: float = RETRY_S,
                 open_reader: Callable[[], Consumer] | None = None) -> None:
        self.topic = topic
        self.control_topic = control_topic
        self.book = CancelBook(window_ms)
        self.view = ControlView()
        self.caught_up = threading.Event()
        self._open_reader = open_reader or (lambda: topicreader.open_reader("cancels", kafka, profile="idle"))
        self._window_ms = window_ms
        self._retry_s = retry_s
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._missing: list[str] = []  # topics left out of the current reader (it opens again for them)

    @property
    def topics(self) -> list[str]:
        return [self.topic] if self.control_topic is None else [self.topic, self.control_topic]

    def start(self, timeout: float = 10.0) -> None:
        """Follow on a thread; return once caught up, or after `timeout` with a warning."""
        if self._thread is not None:
            return  # one feed serves both the cancel book and the control view: started once
        self._thread = threading.Thread(target=self._run, name="reach-cancels", daemon=True)
        self._thread.start()
        if not self.caught_up.wait(timeout):
            log.warning("%s not read to its end within %.0fs: a cancel or control record sent before this instance "
                        "started may be missed until it is", ", ".join(self.topics), timeout)

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout=5)

    def _run(self) -> None:
        warned = False
        while not self._stop.is_set():
            try:
                consumer, ends = self._open()
            except (KafkaException, ReachError) as exc:
                if isinstance(exc, TopicMissing):
                    self.caught_up.set()  # no topic: nothing to wait for (a broker in trouble is waited for)
                if not warned:
                    log.warning("cannot follow %s (%s): this instance does not see cancels or control records until "
                                "it can; trying again every %.0fs. Run `reach topics apply` if a topic is missing.",
                                ", ".join(self.topics), exc, self._retry_s)
                    warned = True
                self._stop.wait(self._retry_s)
                continue
            if warned and not self._missing:
                log.info("following %s again", ", ".join(self.topics))
                warned = False
            try:
                self._follow(consumer, ends)
            except KafkaException as exc:
                log.warning("following %s failed (%s); opening it again", ", ".join(self.topics), exc)
                self._stop.wait(self._retry_s)
            finally:
                consumer.close()

    def _open(self) -> tuple[Consumer, dict[tuple[str, int], int]]:
        consumer = self._open_reader()
        try:
            starts: dict[tuple[str, int], int] = {}
            self._missing = []
            for topic in self.topics:
                try:  # cancels from the window, the compacted control topic from its beginning
                    since = now_ms() - self._window_ms if topic == self.topic else None
                    starts.update({(topic, p): o for p, o in topicreader.start_offsets(consumer, topic, since).items()})
                except TopicMissing:
                    if len(self.topics) == 1:
                        raise
                    self._missing.append(topic)
            if not starts:
                raise TopicMissing(f"Topics {', '.join(self._missing)} do not exist.")
            if self._missing:
                log.warning("%s missing: following %s meanwhile; run `reach topics apply`", ", ".join(self._missing),
                            ", ".join(t for t in self.topics if t not in self._missing))
            ends = {tp: topicreader.watermarks(consumer, *tp)[1] for tp in starts}
            consumer.assign([TopicPartition(t, p, offset) for (t, p), offset in starts.items()])
        except BaseException:
            consumer.close()
            raise
        return consumer, {tp: end for tp, end in ends.items() if starts[tp] < end}  # what there is to read

    def _follow(self, consumer: Consumer, ends: dict[tuple[str, int], int]) -> None:
        reopen_at = time.monotonic() + self._retry_s if self._missing else None
        while not self._stop.is_set():
            again = self._apply(consumer, clients.take(consumer, 500, POLL_S))
            if not self.caught_up.is_set() and not again and not topicreader.unread(consumer, ends):
                self.caught_up.set()
            if again:
                self._stop.wait(REGISTRY_PAUSE_S)
            if reopen_at is not None and time.monotonic() >= reopen_at:
                self.caught_up.set()  # what exists is read; a missing topic has nothing to wait for
                return  # open again: a missing topic may exist now

    def _apply(self, consumer: Consumer, batch: list[Message]) -> bool:
        """Fold a batch into the book and the view; True when control records must be read again (registry out)."""
        again: dict[int, int] = {}
        for msg in batch:
            if msg.error():
                continue
            topic, partition = msg.topic(), msg.partition() or 0
            if topic != self.topic:
                if partition in again:
                    continue  # after a record that must be read again: in order, from there
                try:
                    apply_record(self.view, msg.key(), msg.value(), where=f"{topic}[{partition}]@{msg.offset()}")
                except RegistryUnavailable as exc:
                    log.warning("control feed: %s; reading again", exc)
                    again[partition] = msg.offset() or 0
                continue
            try:
                self.book.add(decode(msg.value()), now_ms())
            except BadCancel as exc:
                log.warning("skipping %s[%d]@%d: %s", topic, partition, msg.offset(), exc)
        for partition, offset in again.items():
            consumer.seek(TopicPartition(self.control_topic or "", partition, offset))
        return bool(again)
