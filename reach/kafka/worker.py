"""The batch worker every consumer loop runs on: read a batch, decode once, handle, produce, wait for acks, commit.

A loop subclasses `Worker`, names what it reads in a `Subscription` and implements `handle(records)`; the worker
owns everything about Kafka (decision 0053). Its contract, per batch:

1. **Read.** `clients.take`: wait up to `poll_s` for a first record, drain what is buffered, then (with
   `window_ms`) wait that long more for the batch to fill to `max_records`. Partition EOFs and errors are skipped.
2. **Decode once.** Each record's value is decoded by its topic's `Decoder` (a record model, a record name for
   `codec.decode_dict`, or a function) before the handler sees it; `skip(record)` runs first, on headers and key
   only, and a skipped record is committed without being decoded. Tombstones are handed over undecoded (None).
3. **Handle.** `handle(records)` returns the `Output`s to produce and does the state writes the loop needs (they
   happen before the commit). An output names the input that caused it (`cause`); without one it is caused by
   every record of the batch. A `Hold(cause, seconds)` says a record is not due yet: its partition is sought back
   to it and paused that long, nothing from it on is committed (the handler skips the records after it). An
   exception in `restart_on` is infrastructure (below); any other is the records': the batch is handled again
   record by record, and a record that raises alone, or does not decode, goes to `failed(record, error)`, whose
   outputs (a dead letter, a REJECTED receipt) are produced instead, and the loop moves on. So `handle` must
   tolerate seeing a record again whose batch raised (idempotent state writes).
4. **Produce and wait.** Every output is produced with a delivery report (reach.kafka.acks) and the producer is
   flushed (at most `flush_s`): nothing of a batch is in flight when the next one is read, so produces are
   bounded by one batch. An output the broker refuses for good (too large, no such topic) sends its input to
   `failed(record, Refused)` once; if that hook raises, or an outage leaves outputs unacknowledged, the input
   stays unacknowledged. Three refinements (decision 0063):
   - *Follow-ups*: an output's `then(partition, offset)` returns outputs computed from its delivery report (the
     router's ROUTED receipt names the inbox offset of its forward). They are produced from the report, inside
     the same flush, and the cause counts as acknowledged only once they are too: one flush, not two.
   - *Phases*: outputs of `phase` n+1 are produced only after every output of phases <= n is acknowledged (the
     status fold's changelog after the replies it records as sent). When one is not, the later phases are not
     produced at all and their causes stay unacknowledged (read again).
   - *Untracked*: `tracked=False` is produced with the batch but its delivery holds nothing (a cache record whose
     loss costs a lookup, never a message).
   - *Housekeeping*: `cause=()` is caused by no input (a retention tombstone): its failure holds nothing, and
     `acknowledged` names it when it lands. `idle()` may return such outputs: they are produced the same way.
   Then `acknowledged(delivered)` runs with every output the broker acknowledged and where it landed, before
   the commit (the status fold writes its store rows at the changelog offsets there).
5. **Commit.** Per partition, up to the first record whose outputs are not all acknowledged
   (`Acks.commits`), through the one-in-flight `CommitLedger` (`clients.send_commits`). A partition with an
   unacknowledged record is sought back to it and paused, then resumed after a delay that doubles per failure
   (reach.kafka.backoff); the other partitions move on.
6. **Rebalance.** On revoke, a synchronous final commit of what was acknowledged (`clients.commit_now`); on lost,
   the partitions are forgotten. A revoke happens inside the poll, when nothing of a batch is pending. The loop's
   own `on_assigned`, `on_revoked` (after the final commit) and `on_lost` follow the worker's bookkeeping; a loop
   whose topics change while it runs overrides `subscribe` and `resubscribe` (called before every poll) and hands
   the worker's `Rebalance` callbacks to each subscription it makes.
7. **Restart.** An exception in `restart_on` (Kafka, the Schema Registry, Redis: `InfraUnavailable`) ends the run;
   the `finally` flushes and commits only what was acknowledged, and the supervised loop
   (reach.kafka.supervised) starts a fresh consumer after a growing backoff. Anything else stops the worker.
8. **Metrics.** Each `WorkerMetrics` in `metrics` is told of every batch, failed record and rewind (no-op hooks).

The same code runs on the in-memory bus (a `memory://` bootstrap builds reach.kafka.memory's clients).
"""

from __future__ import annotations

import dataclasses
import functools
import logging
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

from confluent_kafka import Consumer, KafkaError, KafkaException, Message, Producer, TopicPartition

from reach.core.commits import CommitLedger, TopicPart
from reach.errors import InfraUnavailable, ReachError, TopicMissing
from reach.kafka import clients, codec, delivery, topicreader
from reach.kafka import headers as H
from reach.kafka.acks import Acks, Position
from reach.kafka.backoff import PartitionBackoff
from reach.kafka.codec import DecodeError, RegistryUnavailable
from reach.kafka.supervised import SupervisedLoop
from reach.records import AvroRecord
from reach.settings import ConsumerProfile, KafkaSettings, ProducerProfile

log = logging.getLogger("reach.worker")

T = TypeVar("T")

Decoder = type[AvroRecord] | str | Callable[[bytes], Any] | None
"""How a topic's values are decoded: a record model (codec.decode), a record name (codec.decode_dict, a dict), a
function of the bytes, or None (the bytes as they are)."""


class Record(Generic[T]):
    """One consumed record: where it was read, its key and headers, and its value decoded once (`value`)."""

    __slots__ = ("_headers", "key", "offset", "partition", "raw", "topic", "value")

    def __init__(self, msg: Message) -> None:
        self.topic: str = msg.topic() or ""
        self.partition: int = msg.partition() or 0
        self.offset: int = msg.offset() or 0
        self.key: bytes | None = msg.key()
        self.raw: bytes | None = msg.value()
        self._headers: Any = msg.headers()
        self.value: T | None = None

    @property
    def position(self) -> Position:
        return (self.topic, self.partition, self.offset)

    @property
    def headers(self) -> H.Pairs:
        """The record's headers as (name, bytes) pairs."""
        return H.pairs(self._headers)

    @property
    def raw_headers(self) -> Any:
        """The headers as the client returned them: what a record passed on untouched (a forward) carries."""
        return self._headers

    def __repr__(self) -> str:
        return f"Record({self.topic}[{self.partition}]@{self.offset})"


@dataclass(slots=True, eq=False)
class Output:
    """A record to produce on behalf of `cause` (None: of every record of the batch).

    `then(partition, offset)`: the outputs computed from this one's delivery report, produced in the same flush
    (the cause is acknowledged once they are too). `phase`: produced only after every output of a lower phase of
    the batch is acknowledged. `tracked=False`: its delivery holds nothing (module docstring, step 4). Not frozen:
    a frozen dataclass's `__init__` sets each field through `object.__setattr__`, and the router makes two a
    request; nothing changes one after it is made."""

    topic: str
    value: bytes | None
    key: bytes | str | None = None
    headers: H.Headers | None = None
    partition: int | None = None
    cause: Position | tuple[()] | None = None
    then: Callable[[int, int], Iterable[Output]] | None = None
    phase: int = 0
    tracked: bool = True


@dataclass(frozen=True, slots=True)
class Delivered:
    """An output the broker acknowledged, and where it landed (for `Worker.acknowledged`)."""

    output: Output
    partition: int
    offset: int


@dataclass(frozen=True, slots=True)
class Rebalance:
    """The worker's rebalance callbacks, for a loop that makes its own subscriptions (`Worker.subscribe`)."""

    on_assign: Callable[[Any, list[Any]], None]
    on_revoke: Callable[[Any, list[Any]], None]
    on_lost: Callable[[Any, list[Any]], None]


class NotProduced(ReachError):
    """An output of a later phase left unproduced because an earlier phase's output was not acknowledged."""


@dataclass(frozen=True, slots=True)
class Hold:
    """Not due yet: read `cause` (and what follows it in its partition) again in `seconds`."""

    cause: Position
    seconds: float


class Refused(ReachError):
    """The broker refused an output of this record for good (too large, unknown or forbidden topic)."""

    def __init__(self, record: Record[Any], errors: list[Any]) -> None:
        super().__init__(f"the broker refused a record that {record!r} caused: "
                         f"{', '.join(map(delivery.describe, errors))}")
        self.errors = errors


@dataclass(frozen=True)
class Subscription:
    """What a worker reads and how: its group, topics, decoders, batch shape and client settings."""

    group: str
    topics: Sequence[str]
    decode: Decoder | Mapping[str, Decoder] = None
    skip: Callable[[Record[Any]], bool] | None = None
    profile: ConsumerProfile = "hot"
    producer_profile: ProducerProfile = "hot"
    max_records: int = 500
    poll_s: float = 0.2
    window_ms: int = 0
    window_when_busy: bool = False  # the window only after a batch of more than one record: none at low rates
    flush_s: float = 30.0
    commit_every_s: float = 0.0
    consumer_config: Mapping[str, Any] = field(default_factory=dict)
    producer_config: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class BatchStats:
    """What one batch did, for metrics hooks."""

    records: int
    decoded: int
    skipped: int
    failed: int
    outputs: int
    rewound: int
    seconds: float


class WorkerMetrics:
    """Metrics hooks of a worker (no-ops): subclass and override what you count."""

    def batch(self, worker: str, stats: BatchStats) -> None:
        """A batch was handled, produced, acknowledged (or not) and its commit points handed to the ledger."""

    def failed(self, worker: str, record: Record[Any], error: BaseException) -> None:
        """A record went to the `failed` hook (it did not decode, its handling raised, or its outputs were
        refused for good)."""

    def rewound(self, worker: str, tp: TopicPart, offset: int, delay_s: float) -> None:
        """A partition was sought back to its first unacknowledged record and paused for `delay_s`."""


def decoder(spec: Decoder) -> Callable[[bytes], Any]:
    """The decode function of a `Decoder`."""
    if spec is None:
        return lambda data: data
    if isinstance(spec, str):
        return functools.partial(codec.decode_dict, spec)
    if isinstance(spec, type) and issubclass(spec, AvroRecord):
        model = spec
        return lambda data: codec.decode(data, model)
    assert callable(spec)
    return spec


INFRASTRUCTURE: tuple[type[BaseException], ...] = (KafkaException, RegistryUnavailable, InfraUnavailable,
                                                    TopicMissing)
"""What restarts a worker (a fresh consumer from the committed offsets, after a growing backoff): the broker, the
Schema Registry or Redis unreachable, or a topic not created yet (`reach topics apply`)."""


class Worker(SupervisedLoop, Generic[T]):
    """A supervised batch loop over one subscription; subclasses implement `handle` (and usually `failed`)."""

    restart_on = INFRASTRUCTURE
    thread_name = "reach-worker"

    def __init__(self, *, kafka: KafkaSettings, subscription: Subscription,
                 metrics: Sequence[WorkerMetrics] = ()) -> None:
        super().__init__()
        self.kafka = kafka
        self.subscription = subscription
        self.metrics = list(metrics)
        spec = subscription.decode
        if isinstance(spec, Mapping):
            decoders = {topic: decoder(d) for topic, d in spec.items()}
            self._decode: Callable[[str], Callable[[bytes], Any]] = lambda topic: decoders.get(topic, decoder(None))
        else:
            single = decoder(spec)
            self._decode = lambda _topic: single
        self._wants_delivered = type(self).acknowledged is not Worker.acknowledged
        self.consumer: Consumer | None = None  # the current run's (a loop may read its positions in its hooks)

    # -- what a loop implements ----------------------------------------------------------------------

    def handle(self, records: list[Record[T]]) -> Iterable[Output | Hold]:
        """Decide a batch: the outputs to produce (state writes happen in here, before the commit)."""
        raise NotImplementedError

    def failed(self, record: Record[T], error: BaseException) -> Iterable[Output]:
        """A record that did not decode, whose handling raised, or whose outputs were refused for good: the
        outputs that stand for it (a dead letter, a receipt). By default it is logged and skipped."""
        log.warning("%s: %r skipped: %s", self.label or self.thread_name, record, error)
        return ()

    def opened(self) -> None:
        """Called at the start of every run, before subscribing (open stores; raise NotReady-like errors)."""

    def closed(self) -> None:
        """Called at the end of every run, after the final commit."""

    def idle(self) -> Iterable[Output] | None:
        """Called when a poll found nothing (timers); outputs it returns are produced as housekeeping (`cause=()`),
        flushed, and reported to `acknowledged`."""
        return None

    def acknowledged(self, delivered: list[Delivered]) -> None:
        """After a batch's outputs settled, before its commit: every output the broker acknowledged and where it
        landed (state that must name an acknowledged offset is written here). Raising `restart_on` commits nothing
        of the batch."""

    def on_assigned(self, partitions: list[TopicPart]) -> None:
        """Partitions were assigned (inside the poll, before any of their records is read)."""

    def on_revoked(self, partitions: list[TopicPart]) -> None:
        """Partitions are being revoked, after the worker's final commit of what was acknowledged there."""

    def on_lost(self, partitions: list[TopicPart]) -> None:
        """Partitions were lost (or revoked: called after `on_revoked` too): state kept for them goes."""

    def subscribe(self, consumer: Consumer, rebalance: Rebalance) -> None:
        """Subscribe to the subscription's topics; a loop whose topics change overrides this and `resubscribe`."""
        consumer.subscribe(list(self.subscription.topics), on_assign=rebalance.on_assign,
                           on_revoke=rebalance.on_revoke, on_lost=rebalance.on_lost)

    def resubscribe(self, consumer: Consumer) -> bool:
        """Before every poll: subscribe again if the loop's topics changed; False while there is nothing to read
        (the loop waits a moment and asks again)."""
        return True

    # -- the loop ------------------------------------------------------------------------------------

    def _loop(self) -> None:
        sub = self.subscription
        ledger = CommitLedger(every_s=sub.commit_every_s)
        owned: set[TopicPart] = set()
        held = PartitionBackoff()
        consumer = clients.consumer(sub.group, self.kafka, profile=sub.profile, **{
            **sub.consumer_config, "on_commit": functools.partial(clients.on_commit, ledger)})
        producer = clients.producer(self.kafka, profile=sub.producer_profile, **sub.producer_config)
        self.consumer = consumer

        def assigned(_c: Consumer, tps: list[TopicPartition]) -> None:
            parts = [(tp.topic, tp.partition) for tp in tps]
            owned.update(parts)
            self.on_assigned(parts)

        def revoked(c: Consumer, tps: list[TopicPartition]) -> None:
            parts = [(tp.topic, tp.partition) for tp in tps]
            clients.commit_now(c, ledger, parts)  # what was acknowledged, before the partitions go
            self.on_revoked(parts)
            lost(c, tps)

        def lost(_c: Consumer, tps: list[TopicPartition]) -> None:
            parts = [(tp.topic, tp.partition) for tp in tps]
            ledger.forget(parts)
            held.forget(parts)
            owned.difference_update(parts)
            self.on_lost(parts)

        try:
            for topic in sub.topics:
                if not topic.startswith("^"):
                    topicreader.partitions(consumer, topic)  # TopicMissing: not applied yet, retried after the backoff
            self.opened()
            self.subscribe(consumer, Rebalance(assigned, revoked, lost))
            self._mark_ready()
            window = 0.0 if sub.window_when_busy else sub.window_ms / 1000
            while not self._stop.is_set():
                if not self.resubscribe(consumer):
                    self._stop.wait(0.2)
                    continue
                due = held.due(time.monotonic())
                if due:
                    try:
                        consumer.resume([TopicPartition(t, p) for t, p in due])
                    except KafkaException:
                        pass  # revoked meanwhile: its next owner reads it from the committed offset
                wait = sub.poll_s
                next_due = held.next_due()
                if next_due is not None:
                    wait = max(0.0, min(wait, next_due - time.monotonic()))
                messages = clients.take(consumer, sub.max_records, wait, window_s=window)
                if sub.window_when_busy:  # a rate worth waiting for: the last batch held more than one record
                    window = sub.window_ms / 1000 if len(messages) > 1 else 0.0
                if messages:
                    ledger.want(self.process(messages, consumer=consumer, producer=producer, backoff=held))
                else:
                    producer.poll(0)
                    chores = list(self.idle() or ())
                    if chores:
                        self._housekeeping(producer, chores)
                clients.send_commits(consumer, ledger, owned)  # also resends an idle partition's failed commit
        finally:
            try:
                producer.flush(sub.flush_s)  # a batch cut short commits nothing past what was acknowledged
                clients.commit_now(consumer, ledger)
            finally:
                consumer.close()
                self.consumer = None
                self.closed()

    def process(self, messages: list[Message], *, consumer: Consumer, producer: Producer,
                backoff: PartitionBackoff | None = None) -> dict[TopicPart, int]:
        """Handle one batch read by `consumer`, producing with `producer`; the commit points it reached (the loop hands
        them to its ledger). The loop's own step, and the seam a unit test drives with fakes."""
        held = backoff or PartitionBackoff()
        started = time.monotonic()
        acks = Acks()
        records: list[Record[T]] = []
        by_position: dict[Position, Record[T]] = {}
        undecodable: list[tuple[Record[T], BaseException]] = []
        skipped = 0
        skip = self.subscription.skip
        for msg in messages:
            err = msg.error()
            if err is not None:
                if err.code() != KafkaError._PARTITION_EOF:
                    log.warning("%s: consumer: %s", self.label or self.thread_name, err)
                continue
            record: Record[T] = Record(msg)
            acks.seen(record.position)
            by_position[record.position] = record
            if skip is not None and skip(record):
                skipped += 1
                continue
            if record.raw is not None:
                try:
                    record.value = self._decode(record.topic)(record.raw)
                except DecodeError as exc:
                    undecodable.append((record, exc))
                    continue
            records.append(record)
        every = _first_per_partition(by_position)
        handled = self._handled(records, acks) if records else []
        outputs = [o for o in handled if isinstance(o, Output)]
        holds: dict[TopicPart, Hold] = {}
        for hold in (h for h in handled if isinstance(h, Hold)):
            acks.expect(hold.cause)  # never reported: nothing from it on commits
            tp = (hold.cause[0], hold.cause[1])
            if tp not in holds or hold.cause[2] < holds[tp].cause[2]:
                holds[tp] = hold
        for bad, why in undecodable:
            outputs += self._failed(bad, why, acks)
        delivered: list[Delivered] | None = [] if self._wants_delivered else None
        phases: dict[int, list[Output]] = {}
        for out in outputs:
            phases.setdefault(out.phase, []).append(out)
        held_at = {hold.cause for hold in holds.values()}
        blocked: Position | None = None
        for phase in sorted(phases):
            if blocked is not None:  # an earlier phase is not all acknowledged: this one is not produced
                for out in phases[phase]:
                    if out.tracked:
                        for cause in _causes(out, every):
                            acks.fail(cause, NotProduced(f"not produced: an output of {blocked} in an earlier "
                                                         "phase was not acknowledged"))
                continue
            for out in phases[phase]:
                self._produce(producer, acks, out, every, delivered)
            producer.flush(self.subscription.flush_s)
            self._refused(producer, acks, by_position, delivered)
            if len(phases) > 1:
                blocked = next((p for p in acks.unacked() if p not in held_at), None)
        if delivered is not None:
            self.acknowledged(delivered)
        commits = self._settle(acks, consumer, held, holds)
        stats = BatchStats(records=len(by_position), decoded=len(records), skipped=skipped,
                           failed=len(undecodable), outputs=len(outputs), rewound=len(acks.rewinds()) - len(holds),
                           seconds=time.monotonic() - started)
        for hook in self.metrics:
            hook.batch(self.label or self.thread_name, stats)
        return commits

    def _handled(self, records: list[Record[T]], acks: Acks) -> list[Output | Hold]:
        """The batch's outputs; when the batch raises, record by record, a record that raises alone failed."""
        try:
            return list(self.handle(records))
        except self.restart_on:
            raise
        except Exception as exc:  # noqa: BLE001 - a record's fault: isolate it
            if len(records) == 1:
                return list(self._failed(records[0], exc, acks))
            log.warning("%s: a batch of %d raised (%r): handling its records one by one",
                        self.label or self.thread_name, len(records), exc)
        outputs: list[Output | Hold] = []
        for record in records:
            try:
                outputs += [o if isinstance(o, Hold) or o.cause is not None else _caused_by(o, record)
                            for o in self.handle([record])]
            except self.restart_on:
                raise
            except Exception as exc:  # noqa: BLE001 - a record's fault: isolate it
                outputs += self._failed(record, exc, acks)
        return outputs

    def _failed(self, record: Record[T], error: BaseException, acks: Acks) -> list[Output]:
        """The `failed` hook's outputs, each caused by `record`; if the hook raises, the record stays unacked."""
        name = self.label or self.thread_name
        for hook in self.metrics:
            hook.failed(name, record, error)
        try:
            return [o if o.cause is not None else _caused_by(o, record) for o in self.failed(record, error)]
        except self.restart_on:
            raise
        except Exception as exc:  # noqa: BLE001 - not even a dead letter: read it again later
            log.exception("%s: the failed hook of %r raised", name, record)
            acks.fail(record.position, exc)
            return []

    def _housekeeping(self, producer: Producer, outputs: list[Output]) -> None:
        """Outputs of no input (from `idle`): produced, flushed, reported to `acknowledged`; a failure holds nothing."""
        delivered: list[Delivered] = []
        scratch = Acks()
        for out in outputs:
            self._produce(producer, scratch, dataclasses.replace(out, cause=()), [], delivered)
        producer.flush(self.subscription.flush_s)
        self.acknowledged(delivered)

    def _refused(self, producer: Producer, acks: Acks, by_position: Mapping[Position, Record[T]],
                 delivered: list[Delivered] | None) -> None:
        """Inputs with an output the broker refused for good go to `failed` (a dead letter, a REJECTED receipt)
        instead, so they never hold their partition."""
        refused = [p for p in acks.unacked() if acks.errors(p) and all(delivery.permanent(e) for e in acks.errors(p))]
        if not refused:
            return
        for position in refused:
            record = by_position[position]
            error = Refused(record, acks.errors(position))
            acks.reset(position)
            for out in self._failed(record, error, acks):
                self._produce(producer, acks, out, [position], delivered)
        producer.flush(self.subscription.flush_s)

    def _produce(self, producer: Producer, acks: Acks, out: Output, every: list[Position],
                 delivered: list[Delivered] | None = None) -> None:
        if not out.tracked:  # nothing waits for it: a lost record costs a lookup, never a message
            extra: dict[str, Any] = {} if out.partition is None else {"partition": out.partition}
            try:
                producer.produce(out.topic, out.value, key=out.key, headers=out.headers, **extra)
            except (BufferError, KafkaException) as exc:
                log.debug("%s: an untracked record to %s was not queued: %s", self.label or self.thread_name,
                          out.topic, exc)
            return
        cause: Position | list[Position] = out.cause if out.cause else _causes(out, every)
        then: Callable[[Message], None] | None = None
        if out.then is not None or delivered is not None:
            def then(msg: Message) -> None:  # inside the flush: follow-ups join it, their cause waits for them
                partition, offset = msg.partition() or 0, msg.offset() or 0
                if delivered is not None:
                    delivered.append(Delivered(out, partition, offset))
                for follow in (out.then(partition, offset) if out.then is not None else ()):
                    if follow.cause is None and out.cause is not None:
                        follow = _caused_at(follow, out.cause)
                    self._produce(producer, acks, follow, every, delivered)
        delivery.produce(producer, acks, cause, out.topic, out.value, key=out.key, headers=out.headers,
                         partition=out.partition, then=then)

    def _settle(self, acks: Acks, consumer: Consumer, held: PartitionBackoff,
                holds: Mapping[TopicPart, Hold]) -> dict[TopicPart, int]:
        """The commit points; partitions with an unacknowledged record sought back and paused."""
        commits = acks.commits()
        rewinds = acks.rewinds()
        for tp in commits.keys() - rewinds.keys():
            held.cleared(tp)
        now = time.monotonic()
        for tp, hold in holds.items():
            if rewinds.get(tp) == hold.cause[2]:  # not due yet, and nothing before it failed
                del rewinds[tp]
                consumer.pause([TopicPartition(*tp)])
                consumer.seek(TopicPartition(*tp, hold.cause[2]))
                held.hold_for(tp, now, hold.seconds)
        if not rewinds:
            return commits
        first = next(p for p in acks.unacked() if (p[0], p[1]) in rewinds)
        log.warning("%s: reading %d partition(s) again from their first unacknowledged record, e.g. %s: %s",
                    self.label or self.thread_name, len(rewinds), first,
                    ", ".join(map(delivery.describe, acks.errors(first))) or "not acknowledged in time")
        for (topic, partition), offset in rewinds.items():
            consumer.seek(TopicPartition(topic, partition, offset))
            consumer.pause([TopicPartition(topic, partition)])
            delay = held.hold((topic, partition), now)
            for hook in self.metrics:
                hook.rewound(self.label or self.thread_name, (topic, partition), offset, delay)
        return commits


def _causes(out: Output, every: list[Position]) -> list[Position]:
    """The inputs an output holds: its cause, every partition's first record (None), or none (housekeeping, ())."""
    if out.cause is None:
        return every
    return [out.cause] if out.cause else []


def _caused_by(out: Output, record: Record[Any]) -> Output:
    return _caused_at(out, record.position)


def _caused_at(out: Output, position: Position | tuple[()]) -> Output:
    return dataclasses.replace(out, cause=position)


def _first_per_partition(records: Mapping[Position, Record[Any]]) -> list[Position]:
    """The first record of each partition in a batch: an output of the whole batch holds each partition there."""
    first: dict[TopicPart, Position] = {}
    for topic, partition, offset in records:
        known = first.get((topic, partition))
        if known is None or offset < known[2]:
            first[topic, partition] = (topic, partition, offset)
    return list(first.values())
