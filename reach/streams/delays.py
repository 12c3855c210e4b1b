"""Delay tiers: hold each partition's head record until it is due (pause the partition), then republish it."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import cast

from confluent_kafka import Consumer, KafkaError, Message, Producer, TopicPartition

from reach import clients, codec, dlq, headers
from reach.codec import DecodeError
from reach.envelopes import now_ms
from reach.names import Names
from reach.records import Envelope, ErrorInfo
from reach.settings import KafkaSettings

log = logging.getLogger("reach.delays")
_STRIP = {headers.DUE_AT, headers.TARGET}


class DelayForwarder:
    """One consumer over every tier. A record not yet due pauses its partition (others keep moving) and is
    re-read when due; so a record is late by at most the wait behind an earlier, later-due record of the
    same tier partition (bounded by the tier's length) plus one poll interval."""

    def __init__(self, *, names: Names, tiers: list[str], kafka: KafkaSettings | None = None,
                 clock: Callable[[], int] = now_ms, poll_s: float = 0.1) -> None:
        self.names = names
        self.topics = [names.retry(t) for t in tiers]
        self._kafka = kafka or KafkaSettings()
        self._clock = clock
        self._poll_s = poll_s
        self._held: dict[tuple[str, int], int] = {}
        self.forwarded = 0
        self.dead_lettered = 0

    def run(self, stop: threading.Event) -> None:
        """Forward until `stop`; a failure (broker refused a forward, lost connection) restarts the consumer,
        which resumes from the last commit: at least once, never a silent stop."""
        backoff = 0.2
        while not stop.is_set():
            try:
                self._run(stop)
                return
            except Exception:  # noqa: BLE001 - logged; the thread must outlive broker hiccups
                log.exception("delay tiers: restarting in %.1fs", backoff)
                self._held.clear()
                stop.wait(backoff)
                backoff = min(backoff * 2, 5.0)

    def _run(self, stop: threading.Event) -> None:
        consumer = clients.consumer(self.names.topic("delays"), self._kafka,
                                    **{"partition.assignment.strategy": "cooperative-sticky"})
        producer = clients.producer(self._kafka)
        consumer.subscribe(self.topics, on_revoke=self._revoked, on_lost=self._revoked)
        try:
            while not stop.is_set():
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
        commits: dict[tuple[str, int], int] = {}
        errors: list[KafkaError] = []

        def acked(err: KafkaError | None, _msg: Message) -> None:
            if err is not None:
                errors.append(err)

        now = self._clock()
        for msg in batch:
            topic, part, offset = msg.topic() or "", msg.partition() or 0, msg.offset() or 0
            if msg.error() or (topic, part) in self._held:
                continue  # records fetched behind a held head wait with it
            hdrs = cast(headers.Headers, msg.headers() or [])
            found = {k: v if isinstance(v, bytes) else str(v or "").encode() for k, v in hdrs}
            due = int(found[headers.DUE_AT]) if headers.DUE_AT in found else now
            if due > now:
                consumer.pause([TopicPartition(topic, part)])
                consumer.seek(TopicPartition(topic, part, offset))
                self._held[(topic, part)] = due
                continue
            value = msg.value() or b""
            target = found[headers.TARGET].decode() if headers.TARGET in found else self._target_of(value)
            if target is None:
                self._dead_letter(producer, value, (topic, part, offset), acked)
            else:
                keep = [(k, v) for k, v in hdrs if k not in _STRIP]
                producer.produce(target, value, key=msg.key(), headers=keep, on_delivery=acked)
                self.forwarded += 1
            commits[(topic, part)] = offset + 1
        if not commits:
            return
        producer.flush(30)
        if errors:
            raise RuntimeError(f"delay tier: the broker refused a forward: {errors[0]}; not committing")
        consumer.commit(offsets=[TopicPartition(t, p, o) for (t, p), o in commits.items()], asynchronous=False)

    def _target_of(self, value: bytes) -> str | None:
        try:
            return self.names.capability(codec.decode(value, Envelope).capability)
        except (DecodeError, ValueError):
            return None

    def _dead_letter(self, producer: Producer, value: bytes, origin: tuple[str, int, int],
                     acked: Callable[[KafkaError | None, Message], None]) -> None:
        error = ErrorInfo(kind="INVALID_INPUT", code=dlq.UNDECODABLE,
                          message="a record on a delay tier is not a decodable Envelope")
        letter, hdrs = dlq.letter(value, reason=dlq.UNDECODABLE, error=error, origin=origin)
        producer.produce(self.names.dlq, letter, key=f"{origin[0]}:{origin[1]}:{origin[2]}", headers=hdrs,
                         on_delivery=acked)
        self.dead_lettered += 1
        log.warning("delay tier: dead-lettered an undecodable record at %s", origin)

    def _revoked(self, _consumer: Consumer, partitions: list[TopicPartition]) -> None:
        for tp in partitions:
            self._held.pop((tp.topic, tp.partition), None)
