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
record is counted and skipped. The group is membership only (reach.kafka.election.Membership: the partitions
assigned are paused, this writer never reads its own records); the replay reads through reach.kafka.topicreader.

The live receipts, control and registry come from the process's feed (reach.streams.feed), decoded once for
every view of the process; receipts only while this writer owns a partition, and never a router's ROUTED
receipt. The feed hands them to an inbox this writer's thread drains. The replay after an assignment reads the
receipts log itself from `replay_ms` ago up to where the feed had handed over (the inbox is emptied at that
moment), and holds the feed's records back until it is done: each call is counted once, in order.
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections.abc import Callable, Mapping
from typing import Any

from reach.core.commits import TopicPart
from reach.core.healthmodel.settings import HealthSettings
from reach.core.healthmodel.table import HealthTable
from reach.core.views.controlview import ControlView
from reach.envelopes import now_ms
from reach.errors import ReachError
from reach.kafka import clients, codec, topicreader
from reach.kafka import headers as H
from reach.kafka.codec import RegistryUnavailable
from reach.kafka.election import Membership
from reach.kafka.types import Consumer, KafkaError, KafkaException, Message, Producer
from reach.names import Names
from reach.records import InstanceHealth
from reach.settings import KafkaSettings
from reach.streams.exceptions import StreamsError
from reach.streams.feed import (
    CONTROL,
    RECEIPT,
    REGISTRATION,
    FedLoop,
    Feed,
    Record,
    Start,
    Tail,
    apply_control,
    record_of,
)
from reach.streams.status.lookup import partition_of

log = logging.getLogger("reach.health")
Publish = Callable[[str, InstanceHealth | None], None]
"""Told of every record published (None: the instance left this writer: tombstoned or owned elsewhere)."""

INBOX_LIMIT = 200_000
"""Receipts the feed may hand over before this writer's thread folds them; past it they are dropped and read
again by a replay (a writer that stalls costs a re-read, not memory)."""


def _from_router(msg: Message) -> bool:
    """A router's ROUTED receipt (it carries the router header): not a call, skipped without decoding it."""
    pairs: Any = msg.headers() or ()
    return any(name == H.ROUTER for name, _ in pairs)


def health_group(names: Names) -> str:
    """The writers' consumer group on `<ns>.health`."""
    return f"{names.router_app_id}.health"


class HealthWriter(FedLoop):
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
                 read_partition: Callable[[int], list[tuple[bytes | None, bytes | None]]] | None = None,
                 feed: Feed | None = None) -> None:
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
        # what the feed handed over, drained by this writer's thread
        self._lock = threading.Lock()
        self._meta_in: list[Record] = []
        self._receipts_in: list[Record] = []
        self._reached: dict[int, int] = {}  # receipts partition -> the next offset the feed reads there
        self._overflowed = False  # the inbox dropped receipts: a replay reads them again
        self.feed = feed or Feed(names=names, kafka=kafka)
        self.feed.subscribe("health writer", [
            Tail(names.control, Start.BEGINNING, CONTROL),
            Tail(names.registry, Start.BEGINNING, REGISTRATION),
            Tail(names.receipts, Start.END, RECEIPT, accept=self._wants),
        ], self._take)

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
        producer = clients.producer(self._kafka, profile="feed")
        self._release_all()  # a restarted loop owns nothing until its new group member is assigned
        group: Membership | None = None
        replay: Consumer | None = None
        try:
            self._follow_meta()  # before joining: replayed calls are judged with the policies and builds
            group = Membership(
                group=health_group(self.names), topic=self.names.health, kafka=self._kafka,
                on_assigned=self._assigned, on_revoked=lambda parts: self._revoked(producer, parts, flush=True),
                on_lost=lambda parts: self._revoked(producer, parts, flush=False),
                config={"client.id": f"reach-health {uuid.uuid4().hex[:8]}", "session.timeout.ms": 6_000,
                        "heartbeat.interval.ms": 1_500, "partition.assignment.strategy": "roundrobin",
                        "max.poll.interval.ms": 600_000})
            self.partitions = len(group.partitions())
            self._mark_ready()
            next_tick = 0.0
            while not self._stop.is_set():
                group.poll(0)  # serves the rebalance callbacks; the records are this writer's own
                if self._overflowed:
                    self._overflowed = False
                    self._replay_pending = bool(self.owned)
                if self._replay_pending:
                    if replay is not None:
                        replay.close()
                    replay = self._start_replay()
                if replay is not None:
                    messages = clients.take(replay, 1_000, self.settings.tick_ms / 1000)
                    self.fold(self._below_boundary(messages))
                    if not messages and self._replay_to:
                        self._replayed_by_position(replay)
                    if not self._replay_to:
                        replay.close()
                        replay = None
                else:
                    self._drain()
                if time.monotonic() >= next_tick:  # a change found in a batch waits at most one tick
                    next_tick = time.monotonic() + self.settings.tick_ms / 1000
                    self.publish(producer)
                if replay is None:
                    self._stop.wait(max(next_tick - time.monotonic(), 0.0))
        finally:
            producer.flush(10)
            for consumer in (group, replay):
                if consumer is not None:
                    consumer.close()
            self._release_all()

    # -- what the feed hands over --------------------------------------------------------------------

    def _wants(self, msg: Message) -> bool:
        """Receipts while this writer owns a partition (a replay covers the rest), never a router's ROUTED."""
        return bool(self.owned) and not _from_router(msg)

    def _take(self, records: list[Record], reached: Mapping[TopicPart, int]) -> None:
        """On the feed's thread: queue the records for this writer's thread."""
        with self._lock:
            for record in records:
                (self._receipts_in if record.topic == self.names.receipts else self._meta_in).append(record)
            for (topic, partition), offset in reached.items():
                if topic == self.names.receipts:
                    self._reached[partition] = offset
            if len(self._receipts_in) > INBOX_LIMIT:
                log.warning("health: %d receipts waiting to be folded; dropped and read again by a replay",
                            len(self._receipts_in))
                self._receipts_in.clear()
                self._overflowed = True

    def _drain(self) -> None:
        """Fold what the feed handed over (the writer's thread)."""
        with self._lock:
            meta, self._meta_in = self._meta_in, []
            receipts, self._receipts_in = self._receipts_in, []
        self._meta(meta)
        self.fold_records(receipts)

    def _release_all(self) -> None:
        self.owned.clear()
        self._replay_to.clear()
        self._replay_pending = False
        self.table.drop(lambda _i: False)
        for instance_id in list(self._latest):
            del self._latest[instance_id]
            self._on_publish(instance_id, None)

    def _below_boundary(self, messages: list[Message]) -> list[Message]:
        """The replay's records below where the feed took over (the reader fetches past it, also for a partition
        already replayed): the feed hands over the rest, so each call is counted once."""
        bounds = dict(self._replay_to)
        return [m for m in messages if m.error() is None and (m.offset() or 0) < bounds.get(m.partition() or 0, -1)]

    def _replayed_by_position(self, feed: Consumer) -> None:
        """Idle during a replay: a position at or past the end offset also ends it (the last record may be gone)."""
        for partition, offset in clients.positions(feed, self.names.receipts, list(self._replay_to)).items():
            if offset >= self._replay_to.get(partition, 0):
                self._replay_to.pop(partition, None)

    def _follow_meta(self, timeout: float = 15.0) -> None:
        """Control and registry from the beginning, read up to their ends of now before the writer joins its
        group: replayed calls are judged with the policies' slow thresholds and the instances' build versions."""
        if not self.feed.wait_loaded(timeout):
            log.warning("health: control and registry not read to their ends within %.0fs; going on", timeout)
        with self._lock:
            meta, self._meta_in = self._meta_in, []
        self._meta(meta)

    def _meta(self, records: list[Record]) -> None:
        for record in records:
            if record.topic == self.names.control:
                apply_control(self.control, record)
                continue
            if record.error is not None:
                self._bad(record.where, record.error)
            elif record.value is None:
                self.table.forget_version(record.key_text)
            else:
                self.table.build_version(record.key_text, record.decoded.build_version)

    # -- receipts ------------------------------------------------------------------------------------

    def fold(self, messages: list[Message]) -> int:
        """Fold a batch of receipts read from the log (a replay); returns the calls of owned instances it held.
        A bad receipt is skipped."""
        calls = 0
        for msg in messages:
            err = msg.error()
            if err is not None:
                if err.code() != KafkaError._PARTITION_EOF:
                    log.warning("health receipts consumer: %s", err)
                continue
            partition, offset = msg.partition() or 0, msg.offset() or 0
            if partition in self._replay_to and offset >= self._replay_to[partition]:
                continue  # the feed hands this one over: counted once
            value = msg.value()
            if value is not None and not _from_router(msg):
                calls += self._fold_one(record_of(msg.topic() or "", msg.key(), value, RECEIPT,
                                                  partition=partition, offset=offset))
            if partition in self._replay_to and offset + 1 >= self._replay_to[partition]:
                del self._replay_to[partition]
                if not self._replay_to:
                    log.info("health: receipts replayed; %d instances owned", len(self.table.trackers))
        return calls

    def fold_records(self, records: list[Record]) -> int:
        """Fold receipts the feed decoded; returns the calls of owned instances they held."""
        return sum(self._fold_one(record) for record in records)

    def _fold_one(self, record: Record) -> int:
        if record.error is not None:
            self._bad(record.where, record.error)
            return 0
        try:
            return self.table.fold(record.decoded) is not None
        except Exception as exc:  # noqa: BLE001 - per-record isolation
            self._bad(record.where, exc)
            return 0

    def caught_up(self) -> None:
        """Treat the receipts replay as done (a writer fed by hand through `fold`, as unit tests do)."""
        self._replay_pending = False
        self._replay_to.clear()

    def _start_replay(self) -> Consumer | None:
        """Re-read receipts from replay_ms ago into emptied windows (each call counted once): up to where the feed
        had handed over when the replay began, whose records wait in the inbox until the replay is done.

        `replaying` stays true until the replay reached that boundary."""
        with self._lock:  # the boundary and the emptied inbox, at one moment of the feed's
            self._receipts_in.clear()
            ends = dict(self._reached)
        self.table.clear_windows()
        since = self._clock() - self.settings.replay_ms
        reader = topicreader.open_reader("health-replay", self._kafka)
        try:
            starts = topicreader.start_offsets(reader, self.names.receipts, since)
            self._replay_to = {p: ends[p] for p in starts if starts[p] < ends.get(p, 0)}
            self._replay_pending = False
            if not self._replay_to:
                reader.close()
                return None
            clients.assign(reader, self.names.receipts, {p: starts[p] for p in self._replay_to})
        except BaseException:
            reader.close()
            raise
        return reader

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

    def _assigned(self, partitions: list[int]) -> None:
        """Health partitions given to this writer: each restored from its records before it is owned (the group
        pauses them then: the records that follow are this writer's own)."""
        # pending before `owned` grows: another thread never sees the partitions owned and no replay due
        self._replay_pending = bool(partitions) or self._replay_pending
        for partition in partitions:
            restored = self.restore_records(self._read_partition(partition))
            self.owned.add(partition)
            log.info("health partition %d owned: %d instances restored", partition, restored)

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

    def _revoked(self, producer: Producer, partitions: list[int], *, flush: bool) -> None:
        if flush:
            left = producer.flush(15)  # the next owner restores from what this writer produced
            if left:
                log.warning("health: %d records unacknowledged when giving partitions up", left)
        for partition in partitions:
            self.owned.discard(partition)
        self.table.drop(self.owns)
        for instance_id in [i for i in self._latest if not self.owns(i)]:
            del self._latest[instance_id]
            self._on_publish(instance_id, None)

    def _bad(self, where: str, exc: BaseException) -> None:
        self.bad_records += 1
        log.warning("health: skipped a bad record at %s: %r", where, exc)

    def _policy_slow(self, capability: str) -> int | None:
        return self.control.policy(capability).slow_threshold_ms
