"""Delay tiers: hold each partition's head record until it is due (pause the partition), then republish it.

Each record is read on its own (`next_step`): a due-at that is not epoch millis, a target header that
is not UTF-8 or not a capability topic of the namespace, an undecodable envelope, or a forward the broker
refuses for good (a target that does not exist, a record too large for it) is dead-lettered
with its reason (and a DEAD_LETTERED receipt when the envelope decodes); the tier moves on. Offsets are
committed per partition only up to the first record whose forward the broker has not acknowledged.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import cast

from confluent_kafka import Consumer, Message, Producer, TopicPartition

from reach import dlq
from reach.envelopes import now_ms
from reach.errors import InvalidName
from reach.kafka import clients, codec, delivery, headers
from reach.kafka.acks import Acks, Position
from reach.kafka.codec import DecodeError, RegistryUnavailable
from reach.kafka.topics import DEAD_LETTER_BYTES
from reach.names import Names
from reach.receipts import receipt_for
from reach.records import Envelope, ErrorInfo, Status
from reach.settings import KafkaSettings, RedisSettings
from reach.streams.exceptions import DeliveryFailed
from reach.streams.supervised import SupervisedLoop
from reach.terminals import Fence, Terminal, fence_from_settings

log = logging.getLogger("reach.delays")
_STRIP = {headers.DUE_AT, headers.TARGET}
FORWARD_REFUSED = "FORWARD_REFUSED"  # the broker refused the forward for good (too large, no such topic)


@dataclass(frozen=True, slots=True)
class Hold:
    """Not due yet: pause the partition until `due` (epoch ms)."""

    due: int


@dataclass(frozen=True, slots=True)
class Send:
    """Due: republish the original bytes to `target`."""

    target: str


@dataclass(frozen=True, slots=True)
class Bad:
    """The record cannot be forwarded: dead-letter it with this reason."""

    reason: str
    code: str
    message: str


def next_step(hdrs: headers.Headers, value: bytes, names: Names, now: int) -> Hold | Send | Bad:
    """What to do with one tier record, from its headers (and its envelope when no target header is set)."""
    found = headers.pairs(hdrs)
    try:
        due = headers.integer(found, headers.DUE_AT)
    except headers.HeaderError as exc:
        return Bad(dlq.REJECTED, "BAD_DUE_AT", f"{headers.DUE_AT} {exc.raw[:40]!r} is not epoch milliseconds")
    if due is not None and due > now:
        return Hold(due)
    raw_target = dict(found).get(headers.TARGET)  # the last value wins, as for every header
    if raw_target is None:
        envelope = _envelope(value)
        if envelope is None:
            return Bad(dlq.UNDECODABLE, dlq.UNDECODABLE, "a record on a delay tier is not a decodable Envelope")
        raw_target = f"{names.capability_prefix}{envelope.capability}".encode()
    try:
        target = names.check_target(raw_target.decode())
    except (UnicodeDecodeError, InvalidName) as exc:
        return Bad(dlq.REJECTED, "BAD_TARGET", f"{headers.TARGET} is not a capability topic: {exc}")
    return Send(target)


def _envelope(value: bytes) -> Envelope | None:
    """The decoded envelope, None when it does not decode (RegistryUnavailable propagates: not the record's fault)."""
    try:
        return codec.decode(value, Envelope)
    except (DecodeError, ValueError):
        return None


class DelayForwarder(SupervisedLoop):
    """One consumer over every tier. A record not yet due pauses its partition (others keep moving) and is
    re-read when due; so a record is late by at most the wait behind an earlier, later-due record of the
    same tier partition (bounded by the tier's length) plus one poll interval.

    start()/stop() from any thread. A failure (broker refused a forward, lost connection, a bug) restarts the
    consumer, which resumes from the last commit: at least once, never a silent stop."""

    thread_name = "reach-delays"
    label = "delay tiers"
    restart_on = (Exception,)  # the thread must outlive broker hiccups
    restart_traceback = True
    log = log

    def __init__(self, *, names: Names, tiers: list[str], kafka: KafkaSettings,
                 clock: Callable[[], int] = now_ms, poll_s: float = 0.1,
                 max_bytes: int = DEAD_LETTER_BYTES, redis: RedisSettings,
                 fence: Fence | None = None) -> None:
        super().__init__()
        self.names = names
        self.fence = fence or fence_from_settings("delay tiers", namespace=names.namespace, redis_settings=redis)
        self._max_bytes = max_bytes  # the producer must fit a dead letter of the largest capability record
        self.topics = [names.retry(t) for t in tiers]
        self._kafka = kafka
        self._clock = clock
        self._poll_s = poll_s
        self._held: dict[tuple[str, int], int] = {}
        self.forwarded = 0
        self.dead_lettered = 0

    def _loop(self) -> None:
        self._held.clear()  # a fresh consumer holds no partition
        consumer = clients.consumer(self.names.topic("delays"), self._kafka, profile="hot",  # resumed: read at once
                                    **{"partition.assignment.strategy": "cooperative-sticky"})
        producer = clients.producer(self._kafka, profile="hot", **{
            "message.max.bytes": self._max_bytes, "topic.metadata.propagation.max.ms": delivery.PROPAGATION_MS})
        consumer.subscribe(self.topics, on_revoke=self._revoked, on_lost=self._revoked)
        self._mark_ready()
        try:
            while not self._stop.is_set():
                self._resume_due(consumer)
                batch = clients.take(consumer, 500, self._wait_s())
                if batch:
                    self._forward(consumer, producer, batch)
        finally:
            producer.flush(10)
            consumer.close()

    def _wait_s(self) -> float:
        if not self._held:
            return self._poll_s
        return max(0.0, min(self._poll_s, (min(self._held.values()) - self._clock()) / 1000))

    def _resume_due(self, consumer: Consumer) -> None:
        now = self._clock()
        due = [tp for tp, at in self._held.items() if at <= now]
        if due:
            consumer.resume([TopicPartition(t, p) for t, p in due])
            for tp in due:
                del self._held[tp]

    def _forward(self, consumer: Consumer, producer: Producer, batch: list[Message]) -> None:
        """Forward what is due, dead-letter what is bad, commit per partition only what the broker acknowledged."""
        acks = Acks()
        now = self._clock()
        records: dict[Position, Message] = {}
        stalled: set[tuple[str, int]] = set()
        for msg in batch:
            topic, part, offset = msg.topic() or "", msg.partition() or 0, msg.offset() or 0
            if msg.error() or (topic, part) in self._held or (topic, part) in stalled:
                continue  # records fetched behind a held head wait with it
            hdrs = cast(headers.Headers, msg.headers() or [])
            try:
                step = next_step(hdrs, msg.value() or b"", self.names, now)
            except RegistryUnavailable as exc:  # infrastructure: read this partition again from here
                acks.fail((topic, part, offset), exc)
                stalled.add((topic, part))
                continue
            except Exception as exc:  # noqa: BLE001 - a bug on one record must not stall every tier
                step = Bad(dlq.REJECTED, "DELAY_ERROR", f"the delay tier could not read this record: {exc!r}")
            if isinstance(step, Hold):
                consumer.pause([TopicPartition(topic, part)])
                consumer.seek(TopicPartition(topic, part, offset))
                self._held[(topic, part)] = step.due
                continue
            position = (topic, part, offset)
            records[position] = msg
            if isinstance(step, Send):
                keep = [(k, v) for k, v in hdrs if k not in _STRIP]
                delivery.produce(producer, acks, position, step.target, msg.value() or b"", key=msg.key(),
                                 headers=keep)
                self.forwarded += 1
            else:
                self._dead_letter(producer, acks, position, msg.value() or b"", step)
        if not records and not stalled:
            return
        producer.flush(30)
        refused = [p for p in acks.unacked() if acks.errors(p) and all(delivery.permanent(e) for e in acks.errors(p))]
        if refused:  # a refusal no retry cures (e.g. too large for the target): dead-letter, then settle
            for position in refused:
                why = delivery.describe(acks.errors(position)[0])
                acks.reset(position)
                self._dead_letter(producer, acks, position, records[position].value() or b"",
                                  Bad(dlq.REJECTED, FORWARD_REFUSED, f"the broker refused the forward: {why}"))
            producer.flush(30)
        commits = acks.commits()
        if commits:
            consumer.commit(offsets=[TopicPartition(t, p, o) for (t, p), o in commits.items()], asynchronous=False)
        rewinds = acks.rewinds()
        if rewinds:  # not acknowledged (an outage past the flush, a refusal): read those partitions again
            for (topic, part), offset in rewinds.items():
                consumer.seek(TopicPartition(topic, part, offset))
            first = acks.unacked()[0]
            raise DeliveryFailed(f"delay tier: {len(acks.unacked())} record(s) not acknowledged, e.g. {first}: "
                                 f"{', '.join(map(delivery.describe, acks.errors(first))) or 'still queued'}")

    def _dead_letter(self, producer: Producer, acks: Acks, origin: Position, value: bytes, bad: Bad) -> None:
        try:
            envelope = _envelope(value)
        except RegistryUnavailable:
            envelope = None  # only labels the letter; its bytes are kept either way
        error = ErrorInfo(kind="INVALID_INPUT", code=bad.code, message=bad.message)
        letter, hdrs = dlq.letter(value, reason=bad.reason, error=error, origin=origin, envelope=envelope)
        key = envelope.message_id if envelope else f"{origin[0]}:{origin[1]}:{origin[2]}"
        if envelope is None:
            delivery.produce(producer, acks, origin, self.names.dlq, letter, key=key, headers=hdrs)
        else:  # its row shows where it ended, not a retry that never comes; first terminal wins (reach.terminals)
            encoded = codec.encode(receipt_for(envelope, Status.DEAD_LETTERED, error=error))
            [claim] = self.fence.claim([Terminal(envelope.message_id, envelope.generation, encoded)], again=True)
            if not claim.won:  # it ended meanwhile: that ending again, and no letter
                delivery.produce(producer, acks, origin, self.names.receipts, claim.receipt, key=key)
                return
            # won, or its own first DEAD_LETTERED of this record (read again): the letter, then the stored receipt,
            # which asks the status fold for the capability's fallback (0046) unless the broker refused the record
            # (a child of it would be refused the same way)
            ask = [] if bad.code == FORWARD_REFUSED else [(headers.FALLBACK_ASK, b"delays")]
            delivery.produce(producer, acks, origin, self.names.dlq, letter, key=key, headers=hdrs)
            delivery.produce(producer, acks, origin, self.names.receipts, claim.receipt, key=key,
                             headers=[(headers.MESSAGE_ID, key.encode()), *ask])
        self.dead_lettered += 1
        log.warning("delay tier: dead-lettered the record at %s: %s", origin, bad.message)

    def _revoked(self, _consumer: Consumer, partitions: list[TopicPartition]) -> None:
        for tp in partitions:
            self._held.pop((tp.topic, tp.partition), None)
