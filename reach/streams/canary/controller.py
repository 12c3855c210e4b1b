"""The canary controller: the single writer of CANARY control records, run by the status role.

Every controller folds the registry and control topics (from the beginning) and the receipts (from
the end) into a `reach.core.canarybook.CanaryBook`; only the one that owns partition 0 of `<ns>.control` in the
consumer group `<ns>.canary` writes (promotions, rollbacks, progress), so two status workers never
race each other. A controller that takes over starts its step tallies from the receipts it sees
next: a step in progress is judged on what follows, never on a guess.

The records come from the process's feed (reach.streams.feed), decoded once for every view of the process;
receipts only while a canary runs (none could count otherwise). Receipts in the same fetch as the record that
starts a step are not counted: the step is judged on the calls that follow, as after a take-over.
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections.abc import Callable, Mapping

from reach.control import publish
from reach.core.canarybook import CanaryBook
from reach.core.commits import TopicPart
from reach.envelopes import now_ms
from reach.kafka.codec import RegistryUnavailable
from reach.kafka.election import Election
from reach.kafka.types import KafkaException
from reach.names import Names
from reach.records import Canary, Control, ControlKind, Receipt
from reach.settings import CanarySettings, KafkaSettings
from reach.streams.exceptions import NotReady
from reach.streams.feed import CONTROL, RECEIPT, REGISTRATION, Decoder, FedLoop, Feed, Record, Start, Tail, record_of

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
        """Decode and fold one record of registry, control or receipts (what the feed does for a batch)."""
        decoders: dict[str, Decoder] = {names.registry: REGISTRATION, names.control: CONTROL,
                                        names.receipts: RECEIPT}
        if topic not in decoders or topic == names.receipts and not self.book.running:
            return  # none decoded while no canary runs: none would count
        self.take(record_of(topic, key, value, decoders[topic]), names)

    def take(self, record: Record, names: Names) -> None:
        """Fold one decoded record; a bad one is skipped (logged)."""
        topic, key = record.topic, record.key
        try:
            if record.error is not None:
                raise record.error
            if topic == names.registry:
                self.book.registration(record.key_text, record.decoded)
            elif topic == names.control:
                if record.key_text.startswith(f"{ControlKind.CANARY}:"):
                    control = record.decoded
                    self.book.canary(record.key_text.split(":", 1)[1], control.canary if control is not None else None)
            elif topic == names.receipts and record.decoded is not None and self.book.running:
                self.book.receipt(Receipt.from_avro(record.decoded))
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
        due = self.book.due(now, gate=self._settings.gate())
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


class CanaryController(FedLoop):
    """The Kafka shell around a CanaryDriver: start()/stop() from any thread."""

    thread_name = "reach-canary"
    restart_on = (KafkaException, NotReady, RegistryUnavailable)
    log = log

    def __init__(self, *, names: Names, kafka: KafkaSettings, settings: CanarySettings,
                 feed: Feed | None = None) -> None:
        super().__init__()
        self._names = names
        self._kafka = kafka
        self._settings = settings
        self.worker_id = uuid.uuid4().hex[:12]
        self.driver = CanaryDriver(publish=lambda c: publish(c, names=names, kafka=kafka),
                                   settings=self._settings, by=f"canary-controller/{self.worker_id}")
        self._lock = threading.Lock()  # the book: folded on the feed's thread, ticked on this one
        self.feed = feed or Feed(names=names, kafka=kafka)
        self.feed.subscribe("canary controller", [
            Tail(names.registry, Start.BEGINNING, REGISTRATION),
            Tail(names.control, Start.BEGINNING, CONTROL),
            Tail(names.receipts, Start.END, RECEIPT, accept=lambda _msg: bool(self.driver.book.running)),
        ], self._take)

    def _take(self, records: list[Record], _reached: Mapping[TopicPart, int]) -> None:
        with self._lock:
            for record in records:
                self.driver.take(record, self._names)

    def _loop(self) -> None:
        names = self._names
        driver = self.driver
        # membership only (the leader holds control's partition 0): the feed reads control, this one never fetches it
        election = Election(group=canary_group(names), topic=names.control, kafka=self._kafka)
        try:
            self._mark_ready()
            next_tick, warn_at = 0, time.monotonic() + CATCH_UP_WARN_S
            while not self._stop.is_set():
                election.poll(0.2)  # membership and the assignment callbacks; its records are read by the feed
                driver.leader = election.leader
                if not driver.caught_up:  # the feed folded registry and control up to their ends, on its thread
                    driver.caught_up = self.feed.loaded.is_set()
                    if not driver.caught_up and time.monotonic() >= warn_at:
                        log.warning("canary controller: registry and control not read to their ends after %.0fs "
                                    "(%s); it writes nothing until they are", CATCH_UP_WARN_S, self.feed.describe())
                        warn_at = float("inf")
                now = now_ms()
                if now >= next_tick:
                    with self._lock:
                        driver.tick(now)
                    next_tick = now + self._settings.tick_ms
        finally:
            driver.leader = False
            election.close()
