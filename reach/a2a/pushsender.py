"""The A2A push sender: follows the status table's changelog (`<ns>.status`, the rows the status fold writes per
batch) in the group `<ns>.push` and turns each change of a task that has push configs into `channel.webhook`
envelopes (reach.a2a.push.notifications), produced before the changelog offsets are committed (at least once; the
derived ids make a second production the same message, which the channel agent's lease delivers once). It runs on
the batch worker (reach.kafka.worker, decisions 0053 and 0064): a row's notifications are caused by its changelog
record, so a record is committed only once they are acknowledged and read again after an outage; a notification
is remembered as sent only once the broker acknowledged it (`acknowledged`), and one the broker refuses for good
(too large, no webhook topic) is counted and passed over.

Gateway replicas share the group: each sends for the status partitions it is assigned, and a restarted gateway
resumes from its group's committed offsets, so no change is lost across a restart (decisions/0042). A config set
on a running task is caught up by `offer`: the row as it was read right after the config was acknowledged; and,
since that read may come from a store the fold writes only after its changelog (so a change the sender read before
the config arrived may not be in it), by the last changelog row the sender read of that task within RECENT_S, sent
again when the book applies the config (decisions/0047; the derived ids make it the same messages). Those rows
come from no changelog record: they are the worker's `owed` outputs, offered again until acknowledged.

Per-row isolation: a changelog row that does not read (not JSON, or a row the notifications cannot be made from) is
logged, counted (`skipped`) and passed over; it never stops the sender. A task seen to end is remembered, and its
configs expired (reach.a2a.pushbook) LINGER_S later: the configs in every gateway's memory are bounded.
"""

from __future__ import annotations

import json
import logging
import queue
import time
from collections import OrderedDict
from collections.abc import Iterable, Iterator
from typing import Any

from prometheus_client.core import CounterMetricFamily
from prometheus_client.registry import Collector

from reach.a2a import push
from reach.a2a.pushbook import KafkaPushBook, MemoryPushBook
from reach.a2a.states import FINAL, task_state
from reach.envelopes import now_ms, routing_key
from reach.errors import InfraUnavailable
from reach.kafka import codec
from reach.kafka.acks import Position
from reach.kafka.types import KafkaException
from reach.kafka.worker import Delivered, Output, Record, Refused, Subscription, Worker
from reach.names import Names
from reach.settings import KafkaSettings

log = logging.getLogger("reach.a2a.push")
MAX_CURSORS = 20_000  # tasks tracked here; past it the oldest are forgotten (their notifications would be sent again)
RETRY_S = 1.0  # how soon an offered row whose notifications were not acknowledged is offered again
RECENT_S = 60.0  # how long the last changelog row of a task is kept for a config that arrives after it was read
RECENT_BYTES = 16 << 20  # and at most this many bytes of such rows (the oldest dropped first)
LINGER_S = 600.0  # a task's configs are expired this long after the sender saw it end
MAX_ENDED = 100_000  # ended tasks waiting to be expired; past it the oldest are expired at once
SWEEP_S = 60.0

Sent = tuple[str, str, str]
"""(task id, config id, notification id): one notification owed to one config."""


def group(names: Names) -> str:
    return names.topic("push")


class PushSender(Worker[bytes]):
    """One per gateway process, on the worker's thread: start() / close()."""

    thread_name = "reach-a2a-push-sender"
    log = log

    def __init__(self, *, names: Names, kafka: KafkaSettings, book: MemoryPushBook) -> None:
        super().__init__(kafka=kafka, subscription=Subscription(
            group=group(names), topics=[names.status], profile="idle", producer_profile="hot",
            consumer_config={"auto.offset.reset": "latest"}))
        self._book = book
        self._topic = names.capability(push.WEBHOOK)
        self._sent: OrderedDict[str, dict[str, set[str]]] = OrderedDict()  # task -> config -> notification ids
        self._offers: queue.SimpleQueue[dict[str, Any]] = queue.SimpleQueue()
        self._changed: queue.SimpleQueue[str] = queue.SimpleQueue()
        self._retry: list[dict[str, Any]] = []  # offered rows whose notifications were not all acknowledged
        self._retry_at = 0.0
        self._owing: dict[int, tuple[Sent, dict[str, Any] | None]] = {}  # id(output) -> what it sends, its offer
        self._recent: OrderedDict[str, tuple[float, bytes]] = OrderedDict()  # task -> (read at, its last row)
        self._recent_bytes = 0
        self._ended: OrderedDict[str, float] = OrderedDict()  # task -> when the sender saw it end
        self._next_sweep = 0.0
        self.produced = 0
        self.refused = 0  # notifications the broker refused for good (too large, no webhook topic)
        self.skipped = 0  # changelog rows that did not read, passed over
        self.expired = 0  # tasks whose configs were expired after they ended
        book.listen(self._offers.put)
        book.on_change(self._changed.put)
        book.counts = self.counts

    def counts(self) -> dict[str, int]:
        return {"produced": self.produced, "refused": self.refused, "skipped": self.skipped, "expired": self.expired}

    def close(self) -> None:
        self.stop()

    # -- what the worker asks ------------------------------------------------------------------------

    def handle(self, records: list[Record[bytes]]) -> Iterable[Output]:
        """The notifications the changelog rows owe, each caused by its row's record."""
        rows = []
        for record in records:
            row = self._read(record.value, repr(record))
            if row is not None:
                rows.append((row, record.position))
                self._remember(str(row.get("message_id", "")), record.value or b"")
        if rows:
            self._book.sync()  # a config acknowledged before these changes were folded is known
        batch: set[str] = set()  # two rows of one task in a batch owe some of the same notifications
        return [out for row, position in rows for out in self._notifications(row, batch, None, position)]

    def owed(self) -> Iterable[Output]:
        """The notifications of rows offered by a config's set, and of the kept last row of each task a config was
        just applied for (no changelog record causes them); then what expired."""
        now = time.monotonic()
        rows = [(row, row) for row in _drain(self._offers)]
        for task_id in dict.fromkeys(_drain(self._changed)):
            kept = self._recent.get(task_id)
            row = self._read(kept[1], f"the last row of {task_id[:100]}") if kept is not None else None
            if row is not None:
                rows.append((row, row))
        if self._retry and now >= self._retry_at:
            rows += [(row, row) for row in self._retry]
            self._retry = []
        batch: set[str] = set()
        outputs = [out for row, offer in rows for out in self._notifications(row, batch, offer, None)]
        self._expire(now)
        return outputs

    def acknowledged(self, delivered: list[Delivered]) -> None:
        """Remember what the broker took; an offered row with a notification that did not get through (and was
        not refused for good) is offered again RETRY_S later."""
        for done in delivered:
            owing = self._owing.pop(id(done.output), None)
            if owing is None:  # not a notification
                continue
            (task_id, config_id, mid), _ = owing
            self._sent.setdefault(task_id, {}).setdefault(config_id, set()).add(mid)
            self.produced += 1
        again = {id(offer): offer for _, offer in self._owing.values() if offer is not None}
        if again:
            log.warning("push sender: the notifications of %d offered row(s) not acknowledged; trying again",
                        len(again))
            self._retry += again.values()
            self._retry_at = time.monotonic() + RETRY_S
        self._owing.clear()
        self._forget()

    def owed_refused(self, output: Output, errors: list[Any]) -> None:
        """An offered row's notification the broker refuses for good: counted, settled (never offered again)."""
        super().owed_refused(output, errors)
        owing = self._owing.pop(id(output), None)
        if owing is not None:
            self.refused += 1
            (task_id, config_id, mid), _ = owing
            self._sent.setdefault(task_id, {}).setdefault(config_id, set()).add(mid)

    def failed(self, record: Record[bytes], error: BaseException) -> Iterable[Output]:
        """A changelog row whose notifications the broker refused for good, or that raised: counted, passed over."""
        if isinstance(error, Refused):
            self.refused += len(error.errors)
            log.warning("push sender: %d notifications of %r refused by the broker for good (%s); not sent",
                        len(error.errors), record, error)
        else:
            self.skipped += 1
            log.warning("push sender: no notifications from %r (%s: %.200s); skipped", record,
                        type(error).__name__, error)
        return ()

    # -- what the loop decides -----------------------------------------------------------------------

    def _read(self, value: bytes | None, where: str) -> dict[str, Any] | None:
        if value is None:  # a tombstone: the row's retention
            return None
        try:
            row = json.loads(value)
        except ValueError as exc:
            row = exc
        if not isinstance(row, dict) or not isinstance(row.get("message_id"), str):
            self.skipped += 1
            log.warning("push sender: the status row at %s does not read (%.200s); skipped", where, row)
            return None
        return row

    def _remember(self, task_id: str, raw: bytes) -> None:
        """Keep the task's last changelog row for RECENT_S (and RECENT_BYTES in all)."""
        old = self._recent.pop(task_id, None)
        self._recent_bytes -= len(old[1]) if old is not None else 0
        self._recent[task_id] = (time.monotonic(), raw)
        self._recent_bytes += len(raw)
        horizon = time.monotonic() - RECENT_S
        while self._recent and (self._recent_bytes > RECENT_BYTES or next(iter(self._recent.values()))[0] < horizon):
            _, (_, dropped) = self._recent.popitem(last=False)
            self._recent_bytes -= len(dropped)

    def _expire(self, now: float) -> None:
        """Expire the configs of tasks that ended LINGER_S ago; every SWEEP_S, forget configs past the topic's age."""
        while self._ended and (len(self._ended) > MAX_ENDED or next(iter(self._ended.values())) < now - LINGER_S):
            task_id, _ = self._ended.popitem(last=False)
            self._book.expire(task_id)
            self._sent.pop(task_id, None)
            self.expired += 1
        if now >= self._next_sweep:
            self._next_sweep = now + SWEEP_S
            self._book.sweep(now_ms())

    def _notifications(self, row: dict[str, Any], batch: set[str], offer: dict[str, Any] | None,
                       cause: Position | None) -> list[Output]:
        """What the row owes its task's configs, but what was sent (or is in this `batch`) already. A row the
        notifications cannot be made from is counted and passed over (it never stops the rows behind it)."""
        try:
            return self._owed_by(row, batch, offer, cause)
        except Exception as exc:  # noqa: BLE001 - one row the notifications cannot be made from: pass it
            self.skipped += 1
            log.warning("push sender: no notifications from the row of %.100s (%s: %.200s); skipped",
                        row.get("message_id"), type(exc).__name__, exc)
            return []

    def _owed_by(self, row: dict[str, Any], batch: set[str], offer: dict[str, Any] | None,
                 cause: Position | None) -> list[Output]:
        task_id = str(row.get("message_id", ""))
        task = self._book.get(task_id)
        if task is None or row.get("tenant") != task.tenant:
            return []
        if task_state(str(row.get("status", ""))) in FINAL:  # its configs are expired LINGER_S from now
            self._ended.pop(task_id, None)
            self._ended[task_id] = time.monotonic()
        outputs = []
        for config in task.configs:
            done = self._sent.get(task_id, {}).get(config.id, set())
            for notification in push.notifications(row, config):
                if notification.message_id in done or notification.message_id in batch:
                    continue
                envelope = push.envelope(notification, config, task, trace_id=str(row.get("trace_id") or task_id),
                                         now=now_ms())
                out = Output(self._topic, codec.encode(envelope), key=routing_key(envelope).encode(), cause=cause)
                self._owing[id(out)] = ((task_id, config.id, notification.message_id), offer)
                batch.add(notification.message_id)
                outputs.append(out)
        return outputs

    def _forget(self) -> None:
        """Keep the cursors of at most MAX_CURSORS tasks, the oldest dropped (a later change of such a task sends its
        notifications again, under the same ids: the channel's lease delivers each once)."""
        while len(self._sent) > MAX_CURSORS:
            self._sent.popitem(last=False)


def _drain(source: queue.SimpleQueue[Any]) -> list[Any]:
    out = []
    while True:
        try:
            out.append(source.get_nowait())
        except queue.Empty:
            return out


class PushCollector(Collector):
    """The sender's counters on the gateway's /metrics (one registry per gateway); zeros while no sender runs."""

    def __init__(self, book: MemoryPushBook) -> None:
        self._book = book

    def collect(self) -> Iterator[CounterMetricFamily]:
        counts = self._book.counts() if self._book.counts is not None else dict.fromkeys(
            ("produced", "refused", "skipped", "expired"), 0)
        sent = CounterMetricFamily("agentreach_gateway_push_notifications", "A2A push notifications produced to the "
                                   "webhook channel, and refused by the broker for good", labels=["outcome"])
        sent.add_metric(["produced"], counts["produced"])
        sent.add_metric(["refused"], counts["refused"])
        yield sent
        yield CounterMetricFamily("agentreach_gateway_push_rows_skipped", "Status changelog rows the push sender "
                                  "could not read or make notifications from (logged, passed over)",
                                  value=counts["skipped"])
        yield CounterMetricFamily("agentreach_gateway_push_tasks_expired", "Tasks whose push configs were expired "
                                  "after they ended", value=counts["expired"])


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
