"""The A2A push sender: follows the status table's changelog (`<ns>.status`, the rows the status fold writes per
batch) in the group `<ns>.push` and turns each change of a task that has push configs into `channel.webhook`
envelopes (reach.a2a.push.notifications), produced before the changelog offsets are committed (at least once; the
derived ids make a second production the same message, which the channel agent's lease delivers once).

Gateway replicas share the group: each sends for the status partitions it is assigned, and a restarted gateway
resumes from its group's committed offsets, so no change is lost across a restart (decisions/0042). A config set
on a running task is caught up by `offer`: the row as it was read right after the config was acknowledged.
"""

from __future__ import annotations

import json
import logging
import queue
import threading
from typing import Any

from confluent_kafka import Consumer, KafkaError, KafkaException, Message, Producer

from reach.a2a import push
from reach.a2a.pushbook import KafkaPushBook
from reach.envelopes import now_ms, routing_key
from reach.errors import InfraUnavailable
from reach.kafka import clients, codec, delivery
from reach.names import Names
from reach.settings import KafkaSettings

log = logging.getLogger("reach.a2a.push")
MAX_CURSORS = 20_000  # (task, config) pairs tracked here; past it the oldest are forgotten (sent again)
RETRY_S = 1.0


def group(names: Names) -> str:
    return names.topic("push")


class PushSender:
    """One per gateway process, on a daemon thread."""

    def __init__(self, *, names: Names, kafka: KafkaSettings, book: KafkaPushBook) -> None:
        self._names = names
        self._kafka = kafka
        self._book = book
        self._topic = names.capability(push.WEBHOOK)
        self._sent: dict[tuple[str, str], set[str]] = {}  # (task, config) -> notification ids produced
        self._offers: queue.SimpleQueue[dict[str, Any]] = queue.SimpleQueue()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.produced = 0
        self.refused = 0  # notifications the broker refused for good (too large, no webhook topic)
        book.listen(self._offers.put)

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="reach-a2a-push-sender", daemon=True)
        self._thread.start()

    def close(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=10)

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self._loop()
            except Exception:  # noqa: BLE001 - a fresh consumer resumes from the committed offsets
                log.exception("push sender: restarting in %.0fs", RETRY_S)
                self._stop.wait(RETRY_S)

    def _loop(self) -> None:
        consumer: Consumer = clients.consumer(group(self._names), self._kafka, profile="idle",
                                              **{"auto.offset.reset": "latest"})
        producer: Producer = clients.producer(self._kafka)
        try:
            consumer.subscribe([self._names.status])
            while not self._stop.is_set():
                messages = [m for m in clients.take(consumer, 500, 0.2) if m.error() is None]
                rows = [row for row in map(_row, messages) if row is not None]
                while True:
                    try:
                        rows.append(self._offers.get_nowait())
                    except queue.Empty:
                        break
                if rows:
                    self._book.sync()  # a config acknowledged before these changes were folded is known
                    self._send(producer, rows)
                if messages:
                    consumer.commit(asynchronous=False)
        finally:
            producer.flush(10)
            consumer.close()

    def _send(self, producer: Producer, rows: list[dict[str, Any]]) -> None:
        """Produce every notification the rows owe, and wait for the acks; an outage is retried until it passes, a
        refusal no retry cures (too large, no such topic) is logged and counted, and the sender moves on."""
        while not self._stop.is_set():
            queued: list[tuple[tuple[str, str], str]] = []
            errors: list[Any] = []
            for row in rows:
                queued += self._queue(producer, row, errors)
            if producer.flush(30):
                errors.append("not acknowledged within 30 s")
            if all(delivery.permanent(e) for e in errors):
                for key, mid in queued:
                    self._sent.setdefault(key, set()).add(mid)
                self.produced += len(queued) - len(errors)
                self.refused += len(errors)
                if errors:
                    log.warning("push sender: %d notifications refused by the broker for good (%s); not sent",
                                len(errors), delivery.describe(errors[0]))
                self._forget()
                return
            log.warning("push sender: notifications not acknowledged (%s); trying again", delivery.describe(errors[0]))
            self._stop.wait(RETRY_S)

    def _queue(self, producer: Producer, row: dict[str, Any], errors: list[Any]) -> list[tuple[tuple[str, str], str]]:
        task_id = str(row.get("message_id", ""))
        task = self._book.get(task_id)
        if task is None or row.get("tenant") != task.tenant:
            return []
        queued = []
        for config in task.configs:
            key = (task_id, config.id)
            done = self._sent.get(key, set())
            for notification in push.notifications(row, config):
                if notification.message_id in done:
                    continue
                envelope = push.envelope(notification, config, task, trace_id=str(row.get("trace_id") or task_id),
                                         now=now_ms())

                def report(err: KafkaError | None, _msg: Message) -> None:
                    if err is not None:
                        errors.append(err)

                try:
                    producer.produce(self._topic, key=routing_key(envelope).encode(), value=codec.encode(envelope),
                                     on_delivery=report)
                except (BufferError, KafkaException) as exc:
                    errors.append(exc)
                    continue
                queued.append((key, notification.message_id))
        return queued

    def _forget(self) -> None:
        """Keep at most MAX_CURSORS (task, config) cursors, the oldest dropped (a later change of such a task sends its
        notifications again, under the same ids: the channel's lease delivers each once)."""
        while len(self._sent) > MAX_CURSORS:
            self._sent.pop(next(iter(self._sent)))


def _row(msg: Message) -> dict[str, Any] | None:
    value = msg.value()
    if value is None:
        return None
    try:
        row = json.loads(value)
    except ValueError:
        return None
    return row if isinstance(row, dict) else None


def open_push(names: Names, kafka: KafkaSettings, *, allow_private: bool) -> tuple[KafkaPushBook, PushSender] | None:
    """The book and its sender, started; None when `<ns>.push` does not exist (`reach topics apply` creates it):
    the gateway then offers no push notifications and its cards say so."""
    book = KafkaPushBook(names=names, kafka=kafka, allow_private=allow_private)
    try:
        book.start()
    except (InfraUnavailable, KafkaException) as exc:
        log.warning("A2A push notifications are off: %s (run `reach topics apply`)", exc)
        book.close()
        return None
    sender = PushSender(names=names, kafka=kafka, book=book)
    sender.start()
    return book, sender
