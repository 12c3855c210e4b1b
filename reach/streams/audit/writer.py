"""The audit writer: folds the registry, control, health and apps topics and appends each change to `<ns>.audit`.

It runs in the stream app's status role. The consumer group `<ns>.audit` gives each partition of those topics
to one writer, so a change is appended by one writer, whichever process made it. On each assignment a writer
rebuilds what every key last looked like (reach.core.audit.AuditBook): from the audit topic itself (what was
appended: it outlives the registry's compaction, which removes the records the events came from), then from the
records of its partitions before the group's committed offset, for the keys the audit no longer holds. It
appends the events of the records at or after the committed offset only, and commits a record's offset once the
events before it are acknowledged by the broker (commit after ack). A restarted writer therefore appends
nothing again; a change in flight when it stopped is appended once more only if the audit did not get it.

It runs on the batch worker (reach.kafka.worker, decisions 0053 and 0064): the rebuild is its `on_assigned` hook, an
event is an output caused by its record, an eviction (an instance silent in a registry partition read to its
end) an output owed by no record. The book learns a record when it is handled, so a batch whose events are not
all acknowledged restarts the writer (a fresh book, rebuilt from the audit topic) rather than reading the
records again into a book that already knows them.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Iterable

from reach.core.audit import AuditBook
from reach.core.commits import TopicPart
from reach.envelopes import now_ms
from reach.errors import InfraUnavailable, TopicMissing
from reach.kafka import codec, headers, topicreader
from reach.kafka.acks import Position
from reach.kafka.auditlog import read_events
from reach.kafka.codec import RegistryUnavailable
from reach.kafka.worker import INFRASTRUCTURE, Delivered, Output, Record, Subscription, Worker
from reach.names import Names
from reach.records import AgentRegistration, App, AuditEvent, Control, InstanceHealth
from reach.settings import KafkaSettings
from reach.streams.exceptions import NotReady

log = logging.getLogger("reach.audit")


def audit_group(names: Names) -> str:
    return names.topic("audit")


class AuditDriver:
    """The writer's decisions between reads (no Kafka): which records are new, their events, the evictions."""

    def __init__(self, names: Names) -> None:
        self.names = names
        self.book = AuditBook()
        self.resume: dict[TopicPart, int] = {}  # per owned partition: the first offset not audited yet
        self._partition_of: dict[str, TopicPart] = {}  # registry key -> the owned partition it was read from
        self._streams = {names.registry: "registry", names.control: "control", names.health: "health",
                         names.apps: "apps"}

    def assigned(self, committed: dict[TopicPart, int], history: Iterable[AuditEvent]) -> None:
        """The whole assignment given to this writer, with the group's committed offsets (negative: none yet, so
        every record still in the topic is audited once) and the audit topic's events, oldest first."""
        self.book, self.resume, self._partition_of = AuditBook(), {}, {}
        for event in history:
            self.book.seed(event)
        for tp, offset in committed.items():
            self.resume[tp] = max(offset, 0)

    def revoked(self, tps: list[TopicPart]) -> None:
        for tp in tps:
            self.resume.pop(tp, None)
        self._partition_of = {k: tp for k, tp in self._partition_of.items() if tp in self.resume}

    def batch(self, records: list[Record[bytes]]) -> list[tuple[Position, AuditEvent]]:
        """The events to append for a batch, each with the record it comes from (records before a partition's
        resume point only teach the book)."""
        events: list[tuple[Position, AuditEvent]] = []
        for record in records:
            tp = (record.topic, record.partition)
            start = self.resume.get(tp)
            if start is None:
                continue  # no longer this writer's
            if tp[0] == self.names.registry:
                self._partition_of[(record.key or b"").decode(errors="replace")] = tp
            made = self.record(record, replay=record.offset < start)
            events += [(record.position, event) for event in made]
        return events

    def evictions(self, read_to_end: Iterable[TopicPart], *, now_ms: int) -> list[AuditEvent]:
        """EVICTED for the silent instances of the owned registry partitions read to their end (before that, a
        later heartbeat of the instance may be still unread: an old one alone proves no silence)."""
        done = {tp for tp in read_to_end if tp in self.resume}
        return self.book.evictions([k for k, tp in self._partition_of.items() if tp in done], now_ms=now_ms)

    def record(self, record: Record[bytes], *, replay: bool = False) -> list[AuditEvent]:
        """The events of one record (none when `replay`: only the book learns it); a bad one (undecodable,
        refused by its model) is logged and skipped."""
        topic, key, value = record.topic, (record.key or b"").decode(errors="replace"), record.raw
        where = f"{topic}[{record.partition}]@{record.offset}"
        ts_ms = record.timestamp_ms
        stream = self._streams.get(topic)
        try:
            if stream == "registry":
                reg = codec.decode(value, AgentRegistration) if value is not None else None
                return self.book.registration(key, reg, ts_ms=ts_ms, source=where, replay=replay)
            if stream == "control":
                control = codec.decode(value, Control) if value is not None else None
                return self.book.control(key, control, ts_ms=ts_ms, source=where, removed_by=_by(record),
                                         replay=replay)
            if stream == "health":
                health = codec.decode(value, InstanceHealth) if value is not None else None
                return self.book.health(key, health, ts_ms=ts_ms, source=where, replay=replay)
            if stream == "apps":
                app = codec.decode(value, App) if value is not None else None
                return self.book.app(key, app, ts_ms=ts_ms, source=where, replay=replay)
        except RegistryUnavailable:
            raise
        except Exception as exc:  # noqa: BLE001 - a bad record must not stop the history
            log.warning("audit: skipping a bad record at %s (key %r): %r", where, key, exc)
        return []


def _by(record: Record[bytes]) -> str | None:
    """The x-reach-by header of a tombstone: who removed the record."""
    return headers.text(record.headers, headers.BY) or None


class AuditWriter(Worker[bytes]):
    """The worker around an AuditDriver: start()/stop() from any thread."""

    thread_name = "reach-audit"
    restart_on = (*INFRASTRUCTURE, NotReady)
    log = log

    def __init__(self, *, names: Names, kafka: KafkaSettings) -> None:
        self.worker_id = uuid.uuid4().hex[:12]
        # idle (decision 0044): four quiet topics; the feed profile's 50 ms wait cost ~20 fetches/s for nothing
        super().__init__(kafka=kafka, subscription=Subscription(
            group=audit_group(names), topics=[names.registry, names.control, names.health, names.apps],
            profile="idle", producer_profile="feed", poll_s=0.5, flush_s=15.0,
            consumer_config={"client.id": f"reach-audit {self.worker_id}", "auto.offset.reset": "earliest",
                             "partition.assignment.strategy": "roundrobin"}))
        self._names = names
        self.driver = AuditDriver(names)
        self.appended = 0
        self._expected = 0  # events handed to the worker in this batch

    def opened(self) -> None:
        self.driver = AuditDriver(self._names)  # a restarted loop reads everything again
        try:
            topicreader.partitions(self._consumer_now(), self._names.audit)
        except TopicMissing as exc:  # not applied yet: try again after the backoff, never stop for good
            raise NotReady(str(exc)) from None

    def on_assigned(self, partitions: list[TopicPart]) -> None:
        """Rebuild the book: the audit topic's events, then the partitions' records before the committed offsets."""
        committed = self.committed(partitions) if partitions else {}
        history = read_events(names=self._names, kafka=self.kafka) if partitions else iter(())
        self.driver.assigned(committed, history)
        reader = topicreader.open_reader("audit-rebuild", self.kafka)
        try:
            for (topic, partition), offset in sorted(committed.items()):
                low = topicreader.watermarks(reader, topic, partition)[0]
                if offset > low:
                    self.driver.batch([Record(m) for m in topicreader.read_range(
                        reader, topic, {partition: low}, stops={partition: offset})])
        finally:
            reader.close()

    def on_lost(self, partitions: list[TopicPart]) -> None:
        self.driver.revoked(partitions)

    def handle(self, records: list[Record[bytes]]) -> Iterable[Output]:
        outputs = [self._append(event, cause) for cause, event in self.driver.batch(records)]
        self._expected += len(outputs)
        return outputs

    def owed(self) -> Iterable[Output]:
        owned = self.driver.resume.keys()
        evicted = self.driver.evictions(self.read_to_end(self._names.registry, owned), now_ms=now_ms())
        self._expected += len(evicted)
        return [self._append(event, None) for event in evicted]

    def acknowledged(self, delivered: list[Delivered]) -> None:
        expected, self._expected = self._expected, 0
        if len(delivered) < expected:  # the book already knows these records: rebuild it rather than read them again
            raise InfraUnavailable(f"audit: {expected - len(delivered)} of {expected} event(s) not acknowledged")
        self.appended += len(delivered)

    def _append(self, event: AuditEvent, cause: Position | None) -> Output:
        return Output(self._names.audit, codec.encode(event), key=event.subject.encode(), cause=cause)
