"""The health writer: owns partitions of `<ns>.health`, folds receipts of their instances, publishes InstanceHealth.

Ownership: writers join the group `<ns>.router.health` on the health topic; a partition assigned to a
writer is its to write, and an instance belongs to the partition the producer's murmur2 partitioner
puts its instance_id in. On assignment the writer restores its instances from the (compacted) partition,
read to its end, then re-reads receipts from `replay_ms` ago (offsets by time, every receipts partition,
assign mode) into emptied windows: each call is counted once, and calls up to a restored record's `at` only
fill windows (that record already decided on them). On revocation it flushes what it produced before
letting go (the eager protocol revokes before anyone is assigned), so the next owner restores from a
partition holding its last word; two writers never both write one instance across a rebalance. Control
(POLICY slow_threshold_ms) and the registry (build versions) are followed from the beginning. A bad
record is counted and skipped. Loop style: reach.streams.status.fold (confluent-kafka, `clients.take`).
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Callable
from typing import Any

from confluent_kafka import (
    OFFSET_BEGINNING,
    OFFSET_END,
    Consumer,
    KafkaError,
    KafkaException,
    Message,
    Producer,
    TopicPartition,
)

from reach.control import apply_record
from reach.core.healthmodel.settings import HealthSettings
from reach.core.healthmodel.table import HealthTable
from reach.core.views.control import ControlView
from reach.envelopes import now_ms
from reach.errors import ReachError
from reach.kafka import clients, codec, topicreader
from reach.kafka import headers as H
from reach.kafka.codec import RegistryUnavailable
from reach.names import Names
from reach.records import AgentRegistration, InstanceHealth
from reach.settings import KafkaSettings
from reach.streams.exceptions import StreamsError
from reach.streams.status.lookup import partition_of
from reach.streams.supervised import SupervisedLoop

log = logging.getLogger("reach.health")
Publish = Callable[[str, InstanceHealth | None], None]
"""Told of every record published (None: the instance left this writer: tombstoned or owned elsewhere)."""


def _from_router(msg: Message) -> bool:
    """A router's ROUTED receipt (it carries the router header): not a call, skipped without decoding it."""
    pairs: Any = msg.headers() or ()
    return any(name == H.ROUTER for name, _ in pairs)


def health_group(names: Names) -> str:
    """The writers' consumer group on `<ns>.health`."""
    return f"{names.router_app_id}.health"


class HealthWriter(SupervisedLoop):
    """The single writer of `<ns>.health` for the partitions it owns; start()/stop() run it on a thread.

    `on_publish` sees every record it published (the metrics gauges); `records()` is the latest per owned
    instance, for views in the same process."""

    thread_name = "reach-health-writer"
    # BufferError: librdkafka's queue is full (a broker outage); a fresh loop restores the owned partitions and
    # replays receipts, so nothing that was due is lost (a produce-site retry could not resend tombstones:
    # `due` forgets the tracker first)
    restart_on = (KafkaException, StreamsError, RegistryUnavailable, ReachError, BufferError)
    log = log

    def __init__(self, *, names: Names, kafka: KafkaSettings, settings: HealthSettings,
                 on_publish: Publish | None = None, clock: Callable[[], int] = now_ms,
                 read_partition: Callable[[int], list[tuple[bytes | None, bytes | None]]] | None = None) -> None:
        super().__init__()
        self.names = names
        self.settings = settings
        self._kafka = kafka
        self._on_publish = on_publish or (lambda _i, _r: None)
        self._clock = clock
        self._read_partition = read_partition or self._read_health_partition
        self.control = ControlView()
        self.owned: set[int] = set()
        self.partitions = 0
        self.table = HealthTable(self.settings, owns=self.owns, slow_threshold_ms=self._policy_slow)
        self._latest: dict[str, InstanceHealth] = {}
        self._replay_to: dict[int, int] = {}  # receipts partition -> end offset when the replay began
        self._replay_pending = False
        self.bad_records = 0
        self.published = 0

    def owns(self, instance_id: str) -> bool:
        return bool(self.partitions) and partition_of(instance_id, self.partitions) in self.owned

    def records(self) -> dict[str, InstanceHealth]:
        """The latest record per owned instance (a copy: safe from another thread)."""
        return self._latest.copy()

    @property
    def replaying(self) -> bool:
        """True while receipts are re-read after an assignment (nothing is published meanwhile)."""
        return self._replay_pending or bool(self._replay_to)

    # -- the loop ------------------------------------------------------------------------------------

    def _loop(self) -> None:
        group = clients.consumer(health_group(self.names), self._kafka, profile="idle", **{
            "client.id": f"reach-health {uuid.uuid4().hex[:8]}", "session.timeout.ms": 6_000,
            "heartbeat.interval.ms": 1_500, "partition.assignment.strategy": "roundrobin",
            "max.poll.interval.ms": 600_000})
        meta = topicreader.open_reader("health-meta", self._kafka, profile="idle")
        feed = topicreader.open_reader("health-receipts", self._kafka, profile="feed")
        producer = clients.producer(self._kafka)
        self._release_all()  # a restarted loop owns nothing until its new group member is assigned
        try:
            self.partitions = len(topicreader.partitions(group, self.names.health))
            self._follow_meta(meta)
            group.subscribe([self.names.health],
                            on_assign=lambda c, tps: self._assigned(c, tps),
                            on_revoke=lambda c, tps: self._revoked(producer, tps, flush=True),
                            on_lost=lambda c, tps: self._revoked(producer, tps, flush=False))
            self._mark_ready()
            next_tick = 0.0
            while not self._stop.is_set():
                group.consume(500, 0)  # serves the rebalance callbacks; the records are this writer's own
                self._meta(clients.take(meta, 500, 0))
                if self._replay_pending:
                    self._start_replay(feed)
                messages = clients.take(feed, 1_000, self.settings.tick_ms / 1000) if self.owned else []
                if not self.owned:
                    self._stop.wait(self.settings.tick_ms / 1000)
                self.fold(messages)
                if not messages and self._replay_to:
                    self._replayed_by_position(feed)
                if time.monotonic() >= next_tick:  # a change found in a batch waits at most one tick
                    next_tick = time.monotonic() + self.settings.tick_ms / 1000
                    self.publish(producer)
        finally:
            producer.flush(10)
            for consumer in (group, meta, feed):
                consumer.close()
            self._release_all()

    def _release_all(self) -> None:
        self.owned.clear()
        self._replay_to.clear()
        self._replay_pending = False
        self.table.drop(lambda _i: False)
        for instance_id in list(self._latest):
            del self._latest[instance_id]
            self._on_publish(instance_id, None)

    def _replayed_by_position(self, feed: Consumer) -> None:
        """Idle during a replay: a position at or past the end offset also ends it (the last record may be gone)."""
        for tp in feed.position([TopicPartition(self.names.receipts, p) for p in self._replay_to]):
            if tp.offset >= self._replay_to.get(tp.partition, 0):
                self._replay_to.pop(tp.partition, None)

    def _follow_meta(self, meta: Consumer, timeout: float = 15.0) -> None:
        """Control and registry from the beginning, read up to their ends of now before the writer joins its
        group: replayed calls are judged with the policies' slow thresholds and the instances' build versions."""
        tps, ends = [], {}
        for topic in (self.names.control, self.names.registry):
            for p in topicreader.partitions(meta, topic):
                low, high = topicreader.watermarks(meta, topic, p)
                tps.append(TopicPartition(topic, p, OFFSET_BEGINNING))
                if low < high:
                    ends[(topic, p)] = high
        meta.assign(tps)
        deadline = time.monotonic() + timeout
        while ends and not self._stop.is_set():
            self._meta(clients.take(meta, 500, 0.2))
            ends = topicreader.unread(meta, ends)
            if ends and time.monotonic() >= deadline:
                log.warning("health: control and registry not read to their ends within %.0fs; going on", timeout)
                break

    def _meta(self, messages: list[Message]) -> None:
        for msg in messages:
            if msg.error() is not None:
                continue
            try:
                if msg.topic() == self.names.control:
                    apply_record(self.control, msg.key(), msg.value(), where=self.names.control)
                    continue
                instance_id = (msg.key() or b"").decode(errors="replace")
                value = msg.value()
                if value is None:
                    self.table.forget_version(instance_id)
                else:
                    self.table.build_version(instance_id, codec.decode(value, AgentRegistration).build_version)
            except RegistryUnavailable:
                raise
            except Exception as exc:  # noqa: BLE001 - one bad record must not stop the writer
                self._bad(f"{msg.topic()}@{msg.offset()}", exc)

    # -- receipts ------------------------------------------------------------------------------------

    def fold(self, messages: list[Message]) -> int:
        """Fold a batch of receipts; returns the calls of owned instances it held. A bad receipt is skipped."""
        calls = 0
        for msg in messages:
            err = msg.error()
            if err is not None:
                if err.code() != KafkaError._PARTITION_EOF:
                    log.warning("health receipts consumer: %s", err)
                continue
            value = msg.value()
            if value is not None and not _from_router(msg):
                try:
                    calls += self.table.fold(codec.decode_dict("Receipt", value)) is not None
                except RegistryUnavailable:
                    raise
                except Exception as exc:  # noqa: BLE001 - per-record isolation
                    self._bad(f"{msg.topic()}[{msg.partition()}]@{msg.offset()}", exc)
            partition, offset = msg.partition() or 0, msg.offset() or 0
            if partition in self._replay_to and offset + 1 >= self._replay_to[partition]:
                del self._replay_to[partition]
                if not self._replay_to:
                    log.info("health: receipts replayed; %d instances owned", len(self.table.trackers))
        return calls

    def caught_up(self) -> None:
        """Treat the receipts replay as done (a writer fed by hand through `fold`, as unit tests do)."""
        self._replay_pending = False
        self._replay_to.clear()

    def _start_replay(self, feed: Consumer) -> None:
        """Re-read receipts from replay_ms ago into emptied windows (each call counted once).

        `replaying` stays true until the feed is assigned: a receipt produced once it reads false is read."""
        self.table.clear_windows()
        since = self._clock() - self.settings.replay_ms
        starts = topicreader.start_offsets(feed, self.names.receipts, since)
        ends = {p: topicreader.watermarks(feed, self.names.receipts, p)[1] for p in starts}
        feed.assign([TopicPartition(self.names.receipts, p, o) for p, o in starts.items()])
        self._replay_to = {p: ends[p] for p in starts if starts[p] < ends[p]}
        self._replay_pending = False

    # -- publishing ----------------------------------------------------------------------------------

    def publish(self, producer: Producer) -> list[InstanceHealth | None]:
        """Tick the table and produce what is due (nothing while replaying: the windows are still filling)."""
        if self.replaying or not self.owned:
            return []
        out: list[InstanceHealth | None] = []
        for instance_id, record in self.table.due(self._clock()):
            partition = partition_of(instance_id, self.partitions)
            if partition not in self.owned:
                continue
            value = codec.encode(record) if record is not None else None
            producer.produce(self.names.health, key=instance_id.encode(), value=value, partition=partition,
                             on_delivery=self._delivered)
            if record is None:
                self._latest.pop(instance_id, None)
            else:
                self._latest[instance_id] = record
            self._on_publish(instance_id, record)
            out.append(record)
            self.published += 1
        producer.poll(0)
        return out

    def _delivered(self, err: Any, msg: Any) -> None:
        if err is not None:
            key = msg.key() if msg is not None else None
            log.warning("health record for %r not acknowledged (published again next tick): %s", key, err)
            if key:
                self.table.republish(key.decode(errors="replace"))

    # -- rebalance -----------------------------------------------------------------------------------

    def _assigned(self, consumer: Consumer | None, partitions: list[TopicPartition]) -> None:
        # pending before `owned` grows: another thread never sees the partitions owned and no replay due
        self._replay_pending = bool(partitions) or self._replay_pending
        for tp in partitions:
            restored = self.restore_records(self._read_partition(tp.partition))
            self.owned.add(tp.partition)
            log.info("health partition %d owned: %d instances restored", tp.partition, restored)
        if consumer is not None:  # membership only: the records that follow are this writer's own
            held = [TopicPartition(tp.topic, tp.partition, OFFSET_END) for tp in partitions]
            consumer.assign(held)
            consumer.pause(held)  # else each of its own publishes completes a fetch it would only discard

    def restore_records(self, records: list[tuple[bytes | None, bytes | None]]) -> int:
        """Fold a health partition's records (key, value) in offset order; the last per key wins."""
        latest: dict[str, bytes | None] = {}
        for key, value in records:
            latest[(key or b"").decode(errors="replace")] = value
        restored = 0
        for instance_id, value in latest.items():
            try:
                record = codec.decode(value, InstanceHealth) if value is not None else None
            except RegistryUnavailable:
                raise
            except Exception as exc:  # noqa: BLE001 - a bad record starts that instance afresh
                self._bad(f"{self.names.health} key {instance_id!r}", exc)
                continue
            if record is not None and record.instance_id != instance_id:
                self._bad(f"{self.names.health} key {instance_id!r}", ValueError(
                    f"the record names instance {record.instance_id!r}"))
                continue
            self.table.restore(record, instance_id)
            if record is not None:
                self._latest[instance_id] = record
                restored += 1
        return restored

    def _read_health_partition(self, partition: int) -> list[tuple[bytes | None, bytes | None]]:
        """The partition's records from its beginning to its end now (the previous owner flushed before)."""
        reader = topicreader.open_reader("health-restore", self._kafka)
        try:
            low, _ = topicreader.watermarks(reader, self.names.health, partition)
            return [(m.key(), m.value()) for m in topicreader.read_range(
                reader, self.names.health, {partition: low}, idle_timeout=15)]
        finally:
            reader.close()

    def _revoked(self, producer: Producer, partitions: list[TopicPartition], *, flush: bool) -> None:
        if flush:
            left = producer.flush(15)  # the next owner restores from what this writer produced
            if left:
                log.warning("health: %d records unacknowledged when giving partitions up", left)
        for tp in partitions:
            self.owned.discard(tp.partition)
        self.table.drop(self.owns)
        for instance_id in [i for i in self._latest if not self.owns(i)]:
            del self._latest[instance_id]
            self._on_publish(instance_id, None)

    def _bad(self, where: str, exc: BaseException) -> None:
        self.bad_records += 1
        log.warning("health: skipped a bad record at %s: %r", where, exc)

    def _policy_slow(self, capability: str) -> int | None:
        return self.control.policy(capability).slow_threshold_ms
