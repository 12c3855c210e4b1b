"""One feed per process: one assign-mode consumer reads every topic the process tails, once.

Before it, each view of the stream app (the router's registry, control, health and load views, the health
writer's receipts and policies, the canary controller's book) ran a consumer of its own on the same topics:
every receipt append completed the parked fetch of each, and each decoded the receipt again. The feed reads
each tailed topic with one consumer, decodes a record at most once (and only when a view wants it: a view's
`accept` looks at the headers first) and hands the decoded record to every view that subscribed to the topic
(docs/decisions/0033-one-feed-per-process.md).

Contract:
- Views subscribe before the feed starts (`subscribe` raises after); each names per topic where it starts
  (`Start.BEGINNING`: a compacted topic, read to its end before `loaded`; `Start.END`: from the end as the feed
  first assigned it) and how records decode. Two views of one topic must decode it the same way.
- `take(records, reached)` runs on the feed's thread, once per batch, with the view's records in offset order
  per partition. `reached[(topic, partition)]` is the next offset the feed will read there: every record below
  it was handed over in this call or an earlier one, or refused by the view's `accept`. A view that re-reads
  the log itself (the health writer's replay) takes that as its boundary.
- A record that does not decode reaches the views with `error` set (they count it and go on); a Schema
  Registry outage (RegistryUnavailable) stops the batch before the record: the loop restarts after a backoff
  and reads again from that record, so no view sees a record twice or misses one.
- A restarted loop resumes every partition from where it stopped: the views keep their state.
- Users `acquire()` and `release()` it: the first starts it, the last stops it.
"""

from __future__ import annotations

import logging
import threading
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

from reach.core.commits import TopicPart
from reach.core.views.controlview import ControlView
from reach.kafka import clients
from reach.kafka.codec import RegistryUnavailable, decode, decode_dict
from reach.kafka.receiptbytes import decode_receipt
from reach.kafka.types import OFFSET_BEGINNING, Consumer, KafkaError, KafkaException, Message, TopicPartition
from reach.names import Names
from reach.records import AgentRegistration, Control, InstanceHealth, LoadReport
from reach.settings import ConsumerProfile, KafkaSettings
from reach.streams.exceptions import NotReady
from reach.streams.supervised import SupervisedLoop

log = logging.getLogger("reach.feed")

BATCH = 1_000


class Start(Enum):
    """Where a view starts reading a topic."""

    BEGINNING = "beginning"  # compacted views: the whole topic, read to its end before `loaded`
    END = "end"  # tails: what arrives after the feed first assigned the topic


@dataclass(frozen=True)
class Model:
    """Decode a topic's records into a model (one validation per record, shared by every view)."""

    model: type[Any]

    def __call__(self, value: bytes) -> Any:
        return decode(value, self.model)


@dataclass(frozen=True)
class Plain:
    """Decode a topic's records into dicts (receipts: no model validation on the hot side)."""

    name: str

    def __call__(self, value: bytes) -> Any:
        return decode_dict(self.name, value)


REGISTRATION = Model(AgentRegistration)
CONTROL = Model(Control)
HEALTH = Model(InstanceHealth)
LOAD = Model(LoadReport)
class _Receipts(Plain):
    """Receipts into dicts by the reader generated from Receipt.avsc (the codec for older versions and a registry's
    framing: reach.kafka.receiptbytes.decode_receipt)."""

    def __call__(self, value: bytes) -> Any:
        return decode_receipt(value)


RECEIPT = _Receipts("Receipt")

Decoder = Callable[[bytes], Any]
Accept = Callable[[Message], bool]


@dataclass(slots=True)
class Record:
    """One record as the views see it: decoded once. `decoded` is None for a tombstone and a bad record;
    `error` says why a record is bad (undecodable, refused by its model, a key that is not UTF-8)."""

    topic: str
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    decoded: Any = None
    error: Exception | None = None

    @property
    def key_text(self) -> str:
        return (self.key or b"").decode(errors="replace")

    @property
    def where(self) -> str:
        return f"{self.topic}[{self.partition}]@{self.offset}"


def record_of(topic: str, key: bytes | None, value: bytes | None, decoder: Decoder, *, partition: int = 0,
              offset: int = 0) -> Record:
    """Decode one record for the views; RegistryUnavailable propagates (infrastructure, not a bad record)."""
    record = Record(topic, partition, offset, key, value)
    if value is None:
        return record
    try:
        record.decoded = decoder(value)
    except RegistryUnavailable:
        raise
    except Exception as exc:  # noqa: BLE001 - DecodeError, InvalidRecord: the views count it and go on
        record.error = exc
    return record


def apply_control(view: ControlView, record: Record) -> bool:
    """Fold one decoded control record into a view, as reach.control.apply_record does with bytes: a bad one
    (undecodable, refused, a key that is not UTF-8: no record could replace it) is counted in `view.refused`."""
    try:
        (record.key or b"").decode()
    except UnicodeDecodeError:
        view.refused += 1
        log.warning("skipping a control record whose key %r is not UTF-8 at %s", record.key_text, record.where)
        return False
    if record.error is not None:
        view.refused += 1
        log.warning("skipping a bad control record %r at %s: %s", record.key_text, record.where, record.error)
        return False
    try:
        return view.apply(record.key_text, record.decoded)
    except Exception as exc:  # noqa: BLE001 - a record the view refuses must not stop the feed
        view.refused += 1
        log.warning("skipping a bad control record %r at %s: %s", record.key_text, record.where, exc)
        return False


@dataclass(frozen=True)
class Tail:
    """One topic a view reads through the feed. `required`: a missing topic keeps the feed from starting
    (NotReady); else the view goes on without it (logged). `accept`: looked at before decoding (headers)."""

    topic: str
    start: Start
    decoder: Decoder
    required: bool = True
    accept: Accept | None = None
    missing: str = ""  # what a missing optional topic costs, for the log line


Take = Callable[[list[Record], Mapping[TopicPart, int]], None]


@dataclass(eq=False)
class _View:
    name: str
    tails: dict[str, Tail]
    take: Take
    on_loaded: Callable[[], None] | None
    start_at: dict[TopicPart, int] = field(default_factory=dict)  # END tails: records below are not this view's
    failures: int = 0


class Feed(SupervisedLoop):
    """The process's one tailing consumer; see the module docstring for the contract."""

    thread_name = "reach-feed"
    restart_on = (KafkaException, NotReady, RegistryUnavailable)
    log = log

    def __init__(self, *, names: Names, kafka: KafkaSettings, profile: ConsumerProfile = "feed") -> None:
        super().__init__()
        self.names = names
        self._kafka = kafka
        self._profile = profile
        self._views: list[_View] = []
        self._by_topic: dict[str, list[tuple[_View, Tail]]] = {}
        self._decoders: dict[str, Decoder] = {}
        self._next: dict[TopicPart, int] = {}  # where each partition resumes after a restart
        self._targets: dict[TopicPart, int] = {}  # BEGINNING partitions not read to their first-seen end yet
        self._assigned_once = False
        self._users = 0
        self._users_lock = threading.Lock()
        self.loaded = threading.Event()
        """Every topic some view reads from the beginning is read up to its end as the feed first assigned it."""
        self.records = 0  # read
        self.decoded = 0  # decodes made: at most one per record

    # -- subscriptions and lifecycle -----------------------------------------------------------------

    def subscribe(self, name: str, tails: Sequence[Tail], take: Take, *,
                  on_loaded: Callable[[], None] | None = None) -> None:
        """Hand `take` the records of `tails` from now on; call before the feed starts."""
        if self._thread is not None:
            raise RuntimeError(f"{name} subscribed to the feed after it started: subscribe every view first")
        view = _View(name, {t.topic: t for t in tails}, take, on_loaded)
        for tail in tails:
            known = self._decoders.setdefault(tail.topic, tail.decoder)
            if known != tail.decoder:
                raise ValueError(f"{name} decodes {tail.topic} as {tail.decoder!r}, another view as {known!r}")
            self._by_topic.setdefault(tail.topic, []).append((view, tail))
        self._views.append(view)

    def acquire(self) -> None:
        """Start the feed unless a user already did."""
        with self._users_lock:
            self._users += 1
            if self._users == 1 and not self.running:
                self._stop.clear()
                self.start()

    def release(self, timeout: float | None = None) -> None:
        """Stop the feed when its last user lets it go."""
        with self._users_lock:
            self._users = max(self._users - 1, 0)
            if self._users == 0:
                self.stop(timeout)

    def wait_loaded(self, timeout: float) -> bool:
        return self.loaded.wait(timeout)

    def describe(self) -> str:
        return (f"feed: {len(self._next)} partition(s) of {len(self._by_topic)} topic(s) for "
                f"{', '.join(v.name for v in self._views)}; {self.records} records read, {self.decoded} decoded")

    # -- the loop ------------------------------------------------------------------------------------

    def _loop(self) -> None:
        consumer = clients.consumer(f"{self.names.router_app_id}.feed.{uuid.uuid4().hex[:8]}", self._kafka,
                                    profile=self._profile)  # assign mode: never joins a group nor commits
        try:
            self._assign(consumer)
            self._mark_ready()
            self._check_loaded(consumer)
            while not self._stop.is_set():
                batch = clients.take(consumer, BATCH, 0.2)
                if batch:
                    self._handle(batch)
                if self._targets:
                    self._check_loaded(consumer, batch)
        finally:
            consumer.close()

    def _assign(self, consumer: Consumer) -> None:
        """Every subscribed partition: where the last loop stopped, else where its views start."""
        meta = consumer.list_topics(timeout=15).topics
        assignment: list[TopicPartition] = []
        first = not self._assigned_once
        for topic, subscribers in self._by_topic.items():
            tmeta = meta.get(topic)
            if tmeta is None or tmeta.error is not None:
                required = [v.name for v, tail in subscribers if tail.required]
                if required:
                    raise NotReady(f"topic {topic} is missing ({', '.join(required)} read it); run "
                                   "`reach topics apply`")
                if first:
                    for view, tail in subscribers:
                        log.warning("topic %s is missing, so %s; run `reach topics apply`", topic,
                                    tail.missing or f"{view.name} goes on without it")
                continue
            beginning = any(tail.start is Start.BEGINNING for _, tail in subscribers)
            for p in tmeta.partitions:
                tp = (topic, p)
                if tp in self._next:
                    assignment.append(TopicPartition(topic, p, self._next[tp]))
                    continue
                low, high = consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=15)
                for view, tail in subscribers:
                    if tail.start is Start.END:
                        view.start_at[tp] = high
                start = low if beginning else high
                if beginning and high > low:
                    self._targets[tp] = high
                self._next[tp] = start
                assignment.append(TopicPartition(topic, p, OFFSET_BEGINNING if beginning else high))
        consumer.assign(assignment)
        self._assigned_once = True
        for view in self._views:  # where each view's partitions start: a boundary for a view that re-reads
            self._deliver(view, [], {tp: self._next[tp] for tp in self._next if tp[0] in view.tails})

    def _handle(self, batch: list[Message]) -> None:
        """Decode each record once for the views that accept it, then hand each view its records."""
        out: dict[_View, list[Record]] = {}
        reached: dict[TopicPart, int] = {}
        try:
            for msg in batch:
                err = msg.error()
                if err is not None:
                    if err.code() != KafkaError._PARTITION_EOF:
                        log.warning("feed consumer: %s", err)
                    continue
                topic, partition, offset = msg.topic() or "", msg.partition() or 0, msg.offset() or 0
                record: Record | None = None
                for view, tail in self._by_topic.get(topic, ()):
                    if offset < view.start_at.get((topic, partition), 0):
                        continue
                    if tail.accept is not None and not tail.accept(msg):
                        continue
                    if record is None:
                        record = record_of(topic, msg.key(), msg.value(), tail.decoder, partition=partition,
                                           offset=offset)
                        self.decoded += msg.value() is not None
                    out.setdefault(view, []).append(record)
                reached[(topic, partition)] = offset + 1
                self.records += 1
        finally:  # a registry outage: what was decoded before the record goes out; the restart reads it again
            self._next.update(reached)
            for view in self._views:
                mine = {tp: o for tp, o in reached.items() if tp[0] in view.tails}
                if mine:
                    self._deliver(view, out.get(view, []), mine)

    def _deliver(self, view: _View, records: list[Record], reached: Mapping[TopicPart, int]) -> None:
        try:
            view.take(records, reached)
        except Exception:  # noqa: BLE001 - one view's bug must not starve the others; views isolate per record
            view.failures += 1
            log.exception("feed: %s failed on a batch of %d record(s)", view.name, len(records))

    def _check_loaded(self, consumer: Consumer, batch: Sequence[Message] = ()) -> None:
        """The beginning topics are loaded once each partition's position reached its first-seen end (a position,
        not a last record: the tail of a compacted topic may hold none)."""
        if self._targets:
            for tp, end in list(self._targets.items()):
                if self._next.get(tp, 0) >= end:
                    del self._targets[tp]
            if self._targets and not batch:
                for found in consumer.position([TopicPartition(t, p) for t, p in self._targets]):
                    if found.offset >= self._targets[(found.topic, found.partition)]:
                        del self._targets[(found.topic, found.partition)]
        if not self._targets and not self.loaded.is_set():
            self.loaded.set()
            for view in self._views:
                if view.on_loaded is not None:
                    view.on_loaded()


class FedLoop(SupervisedLoop):
    """A worker loop that reads through the process's feed: starting it starts the feed (unless another user did),
    stopping it lets the feed go, and a failing feed makes it unhealthy."""

    feed: Feed

    def start(self) -> None:
        self.feed.acquire()
        super().start()

    def stop(self, timeout: float | None = None) -> None:
        super().stop(timeout)
        self.feed.release(timeout)

    def healthy(self) -> bool:
        return super().healthy() and self.feed.error is None
