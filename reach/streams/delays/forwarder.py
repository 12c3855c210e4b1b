"""Delay tiers: hold each partition's head record until it is due (pause the partition), then republish it.

Each record is read on its own (`next_step`): a due-at that is not epoch millis, a target header that
is not UTF-8 or not a capability topic of the namespace, an undecodable envelope, or a forward the broker
refuses for good (a target that does not exist, a record too large for it) is dead-lettered
with its reason (and a DEAD_LETTERED receipt when the envelope decodes); the tier moves on. Offsets are
committed per partition only up to the first record whose forward the broker has not acknowledged. It runs on the
batch worker (reach.kafka.worker, decision 0053): a record not due yet is a `Hold`, which pauses its partition
until then; a partition whose forward was not acknowledged is read again after a growing backoff.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import cast

from reach import dlq
from reach.envelopes import now_ms
from reach.errors import InvalidName
from reach.kafka import codec, delivery, headers
from reach.kafka import worker as w
from reach.kafka.codec import DecodeError, RegistryUnavailable
from reach.kafka.topics import DEAD_LETTER_BYTES
from reach.names import Names
from reach.receipts import receipt_for
from reach.records import Envelope, ErrorInfo, Status
from reach.settings import KafkaSettings, RedisSettings
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


class DelayForwarder(w.Worker[bytes]):
    """One consumer over every tier. A record not yet due pauses its partition (others keep moving) and is
    re-read when due; so a record is late by at most the wait behind an earlier, later-due record of the
    same tier partition (bounded by the tier's length) plus one poll interval.

    start()/stop() from any thread. A forward not acknowledged is read again after a growing backoff (at least once);
    an outage of the broker, the Schema Registry or Redis restarts the consumer from the last commit."""

    thread_name = "reach-delays"
    label = "delay tiers"
    restart_traceback = True
    log = log

    def __init__(self, *, names: Names, tiers: list[str], kafka: KafkaSettings,
                 clock: Callable[[], int] = now_ms, poll_s: float = 0.1,
                 max_bytes: int = DEAD_LETTER_BYTES, redis: RedisSettings,
                 fence: Fence | None = None) -> None:
        self.names = names
        self.topics = [names.retry(t) for t in tiers]
        # the producer must fit a dead letter of the largest capability record
        super().__init__(kafka=kafka, subscription=w.Subscription(
            group=names.topic("delays"), topics=self.topics, profile="hot", poll_s=poll_s,  # resumed: read at once
            consumer_config={"partition.assignment.strategy": "cooperative-sticky"},
            producer_config={"message.max.bytes": max_bytes,
                             "topic.metadata.propagation.max.ms": delivery.PROPAGATION_MS}))
        self.fence = fence or fence_from_settings("delay tiers", namespace=names.namespace, redis_settings=redis)
        self._clock = clock
        self.forwarded = 0
        self.dead_lettered = 0

    def handle(self, records: list[w.Record[bytes]]) -> Iterable[w.Output | w.Hold]:
        """Forward what is due, dead-letter what is bad; a record not due holds its partition (and what follows)."""
        now = self._clock()
        out: list[w.Output | w.Hold] = []
        held: set[tuple[str, int]] = set()
        for record in records:
            tp = (record.topic, record.partition)
            if tp in held:
                continue  # records fetched behind a held head wait with it
            hdrs = record.headers
            try:
                step = next_step(cast(headers.Headers, hdrs), record.raw or b"", self.names, now)
            except RegistryUnavailable:
                raise  # infrastructure: read again from the last commit
            except Exception as exc:  # noqa: BLE001 - a bug on one record must not stall every tier
                step = Bad(dlq.REJECTED, "DELAY_ERROR", f"the delay tier could not read this record: {exc!r}")
            if isinstance(step, Hold):
                held.add(tp)
                out.append(w.Hold(record.position, max(0.0, (step.due - now) / 1000)))
            elif isinstance(step, Send):
                keep: headers.Headers = [(k, v) for k, v in hdrs if k not in _STRIP]
                out.append(w.Output(step.target, record.raw or b"", key=record.key, headers=keep,
                                    cause=record.position))
                self.forwarded += 1
            else:
                out += self._dead_letter(record, step)
        return out

    def failed(self, record: w.Record[bytes], error: BaseException) -> Iterable[w.Output]:
        """A forward the broker refused for good (e.g. too large for the target), or a bug: dead-letter it."""
        if isinstance(error, w.Refused):
            why = f"the broker refused the forward: {delivery.describe(error.errors[0])}"
            return self._dead_letter(record, Bad(dlq.REJECTED, FORWARD_REFUSED, why))
        return self._dead_letter(record, Bad(dlq.REJECTED, "DELAY_ERROR",
                                             f"the delay tier could not handle this record: {error!r}"))

    def _dead_letter(self, record: w.Record[bytes], bad: Bad) -> list[w.Output]:
        value, origin = record.raw or b"", record.position
        try:
            envelope = _envelope(value)
        except RegistryUnavailable:
            envelope = None  # only labels the letter; its bytes are kept either way
        error = ErrorInfo(kind="INVALID_INPUT", code=bad.code, message=bad.message)
        letter, hdrs = dlq.letter(value, reason=bad.reason, error=error, origin=origin, envelope=envelope)
        key = envelope.message_id if envelope else f"{origin[0]}:{origin[1]}:{origin[2]}"
        if envelope is None:
            out = [w.Output(self.names.dlq, letter, key=key, headers=hdrs, cause=origin)]
        else:  # its row shows where it ended, not a retry that never comes; first terminal wins (reach.terminals)
            encoded = codec.encode(receipt_for(envelope, Status.DEAD_LETTERED, error=error))
            [claim] = self.fence.claim([Terminal(envelope.message_id, envelope.generation, encoded)], again=True)
            if not claim.won:  # it ended meanwhile: that ending again, and no letter
                return [w.Output(self.names.receipts, claim.receipt, key=key, cause=origin)]
            # won, or its own first DEAD_LETTERED of this record (read again): the letter, then the stored receipt,
            # which asks the status fold for the capability's fallback (0046) unless the broker refused the record
            # (a child of it would be refused the same way)
            ask = [] if bad.code == FORWARD_REFUSED else [(headers.FALLBACK_ASK, b"delays")]
            out = [w.Output(self.names.dlq, letter, key=key, headers=hdrs, cause=origin),
                   w.Output(self.names.receipts, claim.receipt, key=key,
                            headers=[(headers.MESSAGE_ID, key.encode()), headers.status_header("DEAD_LETTERED"),
                                     *ask], cause=origin)]
        self.dead_lettered += 1
        log.warning("delay tier: dead-lettered the record at %s: %s", origin, bad.message)
        return out
