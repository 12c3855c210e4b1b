"""The audit writer: folds the registry, control, health and apps topics and appends each change to `<ns>.audit`.

It runs in the stream app's status role. The consumer group `<ns>.audit` gives each partition of those topics
to one writer, so a change is appended by one writer, whichever process made it. On each assignment a writer
rebuilds what every key last looked like (reach.core.audit.AuditBook): from the audit topic itself (what was
appended: it outlives the registry's compaction, which removes the records the events came from), then from the
records of its partitions before the group's committed offset, for the keys the audit no longer holds. It
appends the events of the records at or after the committed offset only, and commits a record's offset once the
events before it are acknowledged by the broker (commit after ack). A restarted writer therefore appends
nothing again; a change in flight when it stopped is appended once more only if the audit did not get it.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Iterable
from typing import Any

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaException, Message, Producer, TopicPartition

from reach.core.audit import AuditBook
from reach.core.commits import CommitLedger, TopicPart
from reach.envelopes import now_ms
from reach.errors import InfraUnavailable, TopicMissing
from reach.kafka import clients, codec, headers, topicreader
from reach.kafka.auditlog import read_events
from reach.kafka.codec import RegistryUnavailable
from reach.names import Names
from reach.records import AgentRegistration, App, AuditEvent, Control, InstanceHealth
from reach.settings import KafkaSettings
from reach.streams.exceptions import NotReady
from reach.streams.supervised import SupervisedLoop

log = logging.getLogger("reach.audit")

ACK_TIMEOUT_S = 15.0


def audit_group(names: Names) -> str:
    return names.topic("audit")


class AuditDriver:
    """The writer's decisions between reads (no Kafka): which records are new, their events, the commit points."""

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

    def batch(self, messages: list[Message]) -> tuple[list[AuditEvent], dict[TopicPart, int]]:
        """The events to append for a batch, and the commit points once they are acknowledged."""
        events: list[AuditEvent] = []
        commits: dict[TopicPart, int] = {}
        for msg in messages:
            if msg.error() is not None:
                continue
            tp, offset = (msg.topic() or "", msg.partition() or 0), msg.offset() or 0
            start = self.resume.get(tp)
            if start is None:
                continue  # no longer this writer's
            if tp[0] == self.names.registry:
                self._partition_of[(msg.key() or b"").decode(errors="replace")] = tp
            made = self.record(msg, replay=offset < start)
            if offset >= start:
                events.extend(made)
                commits[tp] = offset + 1
        return events, commits

    def evictions(self, read_to_end: Iterable[TopicPart], *, now_ms: int) -> list[AuditEvent]:
        """EVICTED for the silent instances of the owned registry partitions read to their end (before that, a
        later heartbeat of the instance may be still unread: an old one alone proves no silence)."""
        done = {tp for tp in read_to_end if tp in self.resume}
        return self.book.evictions([k for k, tp in self._partition_of.items() if tp in done], now_ms=now_ms)

    def record(self, msg: Message, *, replay: bool = False) -> list[AuditEvent]:
        """The events of one record (none when `replay`: only the book learns it); a bad one (undecodable,
        refused by its model) is logged and skipped."""
        topic, key, value = msg.topic() or "", (msg.key() or b"").decode(errors="replace"), msg.value()
        where = f"{topic}[{msg.partition()}]@{msg.offset()}"
        ts_ms = msg.timestamp()[1]
        stream = self._streams.get(topic)
        try:
            if stream == "registry":
                reg = codec.decode(value, AgentRegistration) if value is not None else None
                return self.book.registration(key, reg, ts_ms=ts_ms, source=where, replay=replay)
            if stream == "control":
                control = codec.decode(value, Control) if value is not None else None
                return self.book.control(key, control, ts_ms=ts_ms, source=where, removed_by=_by(msg),
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


def _read_to_end(consumer: Consumer, topic: str, owned: Iterable[TopicPart]) -> list[TopicPart]:
    """The owned partitions of `topic` whose position has reached the high watermark of the last fetch (local
    calls: no broker round trip)."""
    parts = [TopicPartition(t, p) for t, p in owned if t == topic]
    out = []
    for tp in consumer.position(parts) if parts else []:
        _, high = consumer.get_watermark_offsets(tp, cached=True)
        if tp.offset >= 0 and high >= 0 and tp.offset >= high:
            out.append((tp.topic, tp.partition))
    return out


def _by(msg: Message) -> str | None:
    """The x-reach-by header of a tombstone: who removed the record."""
    for header in msg.headers() or []:
        name, value = header[0], header[1]
        if name == headers.BY and value:
            return value.decode(errors="replace") if isinstance(value, bytes) else str(value)
    return None


class AuditWriter(SupervisedLoop):
    """The Kafka shell around an AuditDriver: start()/stop() from any thread."""

    thread_name = "reach-audit"
    restart_on = (KafkaException, NotReady, RegistryUnavailable, InfraUnavailable)
    log = log

    def __init__(self, *, names: Names, kafka: KafkaSettings) -> None:
        super().__init__()
        self._names = names
        self._kafka = kafka
        self.worker_id = uuid.uuid4().hex[:12]
        self.driver = AuditDriver(names)
        self.appended = 0

    def _loop(self) -> None:
        names, driver, ledger = self._names, AuditDriver(self._names), CommitLedger()
        self.driver = driver  # a restarted loop reads everything again
        # idle (decision 0044): four quiet topics; the feed profile's 50 ms wait cost ~20 fetches/s for nothing
        consumer = clients.consumer(audit_group(names), self._kafka, profile="idle", **{
            "client.id": f"reach-audit {self.worker_id}", "partition.assignment.strategy": "roundrobin",
            "on_commit": lambda err, tps: clients.on_commit(ledger, err, tps)})
        producer = clients.producer(self._kafka, profile="feed")

        def assigned(c: Consumer, tps: list[TopicPartition]) -> None:
            committed = c.committed(tps, timeout=10) if tps else []
            history = read_events(names=names, kafka=self._kafka) if tps else iter(())
            driver.assigned({(tp.topic, tp.partition): tp.offset for tp in committed}, history)
            c.assign([TopicPartition(tp.topic, tp.partition, OFFSET_BEGINNING) for tp in tps])

        def revoked(c: Consumer, tps: list[TopicPartition]) -> None:
            parts = [(tp.topic, tp.partition) for tp in tps]
            clients.commit_now(c, ledger, parts)
            ledger.forget(parts)
            driver.revoked(parts)
            c.unassign()

        def lost(c: Consumer, tps: list[TopicPartition]) -> None:
            parts = [(tp.topic, tp.partition) for tp in tps]
            ledger.forget(parts)
            driver.revoked(parts)

        try:
            for topic in (names.audit, names.registry, names.control, names.health, names.apps):
                try:
                    topicreader.partitions(consumer, topic)
                except TopicMissing as exc:  # not applied yet: try again after the backoff, never stop for good
                    raise NotReady(str(exc)) from None
            consumer.subscribe([names.registry, names.control, names.health, names.apps],
                               on_assign=assigned, on_revoke=revoked, on_lost=lost)
            self._mark_ready()
            while not self._stop.is_set():
                events, commits = driver.batch(clients.take(consumer, 500, 0.5))
                events += driver.evictions(_read_to_end(consumer, names.registry, driver.resume), now_ms=now_ms())
                if events:
                    self._append(producer, events)
                ledger.want(commits)
                clients.send_commits(consumer, ledger, driver.resume.keys())
            clients.commit_now(consumer, ledger)
        finally:
            producer.flush(5)
            consumer.close()

    def _append(self, producer: Producer, events: list[AuditEvent]) -> None:
        """Append and wait for the broker's acknowledgement; InfraUnavailable (a restart from the last
        commit) when it does not come."""
        errors: list[Any] = []

        def report(err: Any, _msg: Any) -> None:
            if err is not None:
                errors.append(err)

        for event in events:
            producer.produce(self._names.audit, key=event.subject.encode(), value=codec.encode(event),
                             on_delivery=report)
        if producer.flush(ACK_TIMEOUT_S) or errors:
            raise InfraUnavailable(f"audit: {len(events)} event(s) not acknowledged: "
                                   f"{errors[0] if errors else 'timed out'}")
        self.appended += len(events)
