"""The canary controller: the single writer of CANARY control records, run by the status role.

Every controller folds the registry and control topics (from the beginning) and the receipts (from
the end) into a `reach.core.canarybook.CanaryBook`; only the one that owns partition 0 of `<ns>.control` in the
consumer group `<ns>.canary` writes (promotions, rollbacks, progress), so two status workers never
race each other. A controller that takes over starts its step tallies from the receipts it sees
next: a step in progress is judged on what follows, never on a guess.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Callable

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaException, Message, TopicPartition

from reach.control import publish
from reach.core.canarybook import CanaryBook
from reach.envelopes import now_ms
from reach.kafka import clients, topicreader
from reach.kafka.codec import RegistryUnavailable, decode
from reach.names import Names
from reach.records import AgentRegistration, Canary, Control, ControlKind, Receipt
from reach.settings import CanarySettings, KafkaSettings
from reach.streams.exceptions import NotReady
from reach.streams.supervised import SupervisedLoop

log = logging.getLogger("reach.canary")

Publish = Callable[[Control], None]
CATCH_UP_WARN_S = 15.0


def canary_group(names: Names) -> str:
    """The election group: the member owning partition 0 of the control topic is the writer."""
    return names.topic("canary")


def canary_record(canary: Canary, *, by: str) -> Control:
    return Control(kind=ControlKind.CANARY, scope=canary.agent_id, canary=canary, updated_at=now_ms(), updated_by=by)


class CanaryDriver:
    """The decisions of a controller between reads (no Kafka): fold records, then tick to write what is due."""

    def __init__(self, *, publish: Publish, settings: CanarySettings, by: str) -> None:
        self.book = CanaryBook()
        self.leader = False
        self.caught_up = False  # registry and control read to their ends: a leader writes nothing before
        self._publish = publish
        self._settings = settings
        self._by = by
        self._reported = 0

    def record(self, topic: str, key: bytes | None, value: bytes | None, names: Names) -> None:
        """Fold one record of registry, control or receipts; a bad one is skipped (logged)."""
        try:
            if topic == names.registry:
                self.book.registration((key or b"").decode(errors="replace"),
                                       decode(value, AgentRegistration) if value is not None else None)
            elif topic == names.control:
                text = (key or b"").decode(errors="replace")
                if text.startswith(f"{ControlKind.CANARY}:"):
                    control = decode(value, Control) if value is not None else None
                    self.book.canary(text.split(":", 1)[1], control.canary if control is not None else None)
            elif topic == names.receipts and value is not None and self.book.running:
                self.book.receipt(decode(value, Receipt))  # none decoded while no canary runs: none would count
        except RegistryUnavailable:
            raise
        except Exception as exc:  # noqa: BLE001 - a bad record must not stop the controller
            log.warning("canary controller: skipping a bad record on %s (key %r): %r", topic, key, exc)

    def tick(self, now: int) -> list[Canary]:
        """As the leader: write each promotion or rollback that is due, and progress every report_ms.

        A failed write is logged and decided again on the next tick (the book still holds the old record).
        Nothing is written before `caught_up`: a book still reading the control topic holds old CANARY versions,
        and progress written from one would land after the newest and win."""
        if not self.leader or not self.caught_up:
            return []
        due = self.book.due(now, min_calls=self._settings.min_calls)
        if now - self._reported >= self._settings.report_ms:
            changed = {c.agent_id for c in due}
            due += [c for c in self.book.progress(now) if c.agent_id not in changed]
            self._reported = now
        written = []
        for canary in due:
            try:
                self._publish(canary_record(canary, by=self._by))
            except Exception as exc:  # noqa: BLE001 - InfraUnavailable and friends: try again next tick
                log.warning("canary %s not written (next tick tries again): %s", canary.agent_id, exc)
                continue
            self.book.canary(canary.agent_id, canary)  # do not judge the old step again before the record is read
            written.append(canary)
            log.info("canary %s %s: %s", canary.agent_id, canary.state, canary.reason)
        return written


class CanaryController(SupervisedLoop):
    """The Kafka shell around a CanaryDriver: start()/stop() from any thread."""

    thread_name = "reach-canary"
    restart_on = (KafkaException, NotReady, RegistryUnavailable)
    log = log

    def __init__(self, *, names: Names, kafka: KafkaSettings, settings: CanarySettings) -> None:
        super().__init__()
        self._names = names
        self._kafka = kafka
        self._settings = settings
        self.worker_id = uuid.uuid4().hex[:12]
        self.driver = CanaryDriver(publish=lambda c: publish(c, names=names, kafka=kafka),
                                   settings=self._settings, by=f"canary-controller/{self.worker_id}")

    def _loop(self) -> None:
        names = self._names
        election = clients.consumer(canary_group(names), self._kafka, profile="idle", **{"session.timeout.ms": 6_000,
                                                                       "heartbeat.interval.ms": 1_500})
        reader = clients.consumer(f"{canary_group(names)}.reader.{self.worker_id}", self._kafka, profile="feed")
        driver = self.driver
        driver.book, driver.caught_up = CanaryBook(), False  # a restarted loop reads everything again

        def assigned(c: Consumer, partitions: list[TopicPartition]) -> None:
            driver.leader = any(tp.partition == 0 for tp in partitions)
            c.assign(partitions)
            c.pause(partitions)  # membership only: `reader` reads control; this one would fetch it a second time

        def revoked(_c: Consumer, _partitions: list[TopicPartition]) -> None:
            driver.leader = False

        try:
            election.subscribe([names.control], on_assign=assigned, on_revoke=revoked, on_lost=revoked)
            positions, ends = self._positions(reader)
            reader.assign(positions)
            self._mark_ready()
            next_tick, warn_at = 0, time.monotonic() + CATCH_UP_WARN_S
            while not self._stop.is_set():
                election.poll(0)  # membership and the assignment callbacks; its records are read by `reader`
                batch: list[Message] = clients.take(reader, 500, 0.2)
                for msg in batch:
                    if msg.error() is None:
                        driver.record(msg.topic() or "", msg.key(), msg.value(), names)
                if not driver.caught_up:
                    ends = topicreader.unread(reader, ends)
                    driver.caught_up = not ends
                    if ends and time.monotonic() >= warn_at:
                        log.warning("canary controller: registry and control not read to their ends after %.0fs "
                                    "(%s); it writes nothing until they are", CATCH_UP_WARN_S,
                                    ", ".join(f"{t}[{p}] up to {end}" for (t, p), end in ends.items()))
                        warn_at = float("inf")
                now = now_ms()
                if now >= next_tick:
                    driver.tick(now)
                    next_tick = now + self._settings.tick_ms
        finally:
            driver.leader = False
            election.close()
            reader.close()

    def _positions(self, reader: Consumer) -> tuple[list[TopicPartition], dict[tuple[str, int], int]]:
        """Registry and control from the beginning, receipts from their end; and the ends of registry and
        control as read before the assignment (where catching up ends), for the partitions that hold records."""
        names = self._names
        meta = reader.list_topics(timeout=15).topics
        out, ends = [], {}
        for topic in (names.registry, names.control, names.receipts):
            tmeta = meta.get(topic)
            if tmeta is None or tmeta.error is not None:
                raise NotReady(f"topic {topic} is missing; run `reach topics apply`")
            for p in tmeta.partitions:
                low, high = reader.get_watermark_offsets(TopicPartition(topic, p), timeout=15)
                if topic == names.receipts:
                    out.append(TopicPartition(topic, p, high))
                else:
                    out.append(TopicPartition(topic, p, OFFSET_BEGINNING))
                    if low < high:
                        ends[(topic, p)] = high
        return out, ends
