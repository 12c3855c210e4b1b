"""The router's state loop: registry, control, health (compacted, from the beginning), receipts, loads (from the end).

One group-less consumer reads them all. Registry and control rebuild the in-memory views on every
start, since the topics are compacted (the state survives in Kafka). Receipts feed the load
tracker; they are read from the end (replies to reply_to are the status fold's, which commits
what it replied: reach.streams.status). Load reports are read from the end too: every instance sends one about
once a second, so a fresh worker is current within a second (heartbeats are the base until then).
Health (`<ns>.health`, InstanceHealth keyed by instance_id) is written by the health writers alone
(reach.streams.health); routers only read it into `RouterState.health`.
"""

from __future__ import annotations

import logging
import threading
import uuid
from collections.abc import Callable, Mapping
from typing import Any

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaException, TopicPartition

from reach.control import ControlView
from reach.control import apply_record as apply_control
from reach.core.loads import LoadTracker
from reach.core.views.registry import RegistryView
from reach.errors import InvalidName
from reach.kafka import clients
from reach.kafka import headers as H
from reach.kafka.codec import RegistryUnavailable, decode, decode_dict
from reach.names import Names
from reach.records import TERMINAL, AgentRegistration, InstanceHealth, LoadReport, Status
from reach.settings import KafkaSettings
from reach.streams.exceptions import NotReady
from reach.streams.supervised import SupervisedLoop

log = logging.getLogger("reach.router.state")

_FINISHING = frozenset(s.value for s in TERMINAL) | {Status.ATTEMPT_FAILED.value, Status.RETRY_SCHEDULED.value}


class RouterState:
    """The views the hot loop reads: registry, control, loads, health."""

    def __init__(self) -> None:
        self.registry = RegistryView()
        self.control = ControlView()
        self.loads = LoadTracker()
        self.ready = threading.Event()
        self._latest: dict[str, AgentRegistration] = {}
        self._health: dict[str, InstanceHealth] = {}
        self.health: Mapping[str, InstanceHealth] = self._health
        """The latest InstanceHealth per instance_id; an instance without one is healthy (CLOSED, admit 1)."""

    def apply_health(self, instance_id: str, record: InstanceHealth | None) -> None:
        if record is None:
            self._health.pop(instance_id, None)
        else:
            self._health[instance_id] = record

    def apply_registration(self, instance_id: str, registration: AgentRegistration | None) -> None:
        self.registry.apply(instance_id, registration)
        if registration is None:
            self._latest.pop(instance_id, None)
            self.loads.forget(instance_id)
        else:
            self._latest[instance_id] = registration
            self.loads.heartbeat(registration)

    def live(self, now: int) -> list[AgentRegistration]:
        return self.registry.live(now)

    def capabilities(self, now: int) -> frozenset[str]:
        """Capabilities some live instance serves (the only ones metrics label by name)."""
        return frozenset(c.name for reg in self.live(now) for c in reg.capabilities)

    def registration(self, instance_id: str) -> AgentRegistration | None:
        """The latest heartbeat seen from an instance, whatever its state."""
        return self._latest.get(instance_id)


class StateLoop(SupervisedLoop):
    """Keeps a RouterState current."""

    thread_name = "reach-router-state"
    restart_on = (KafkaException, NotReady, RegistryUnavailable)
    log = log

    def __init__(self, *, state: RouterState, names: Names, kafka: KafkaSettings, router_id: str | None = None,
                 on_bad_record: Callable[[], None] = lambda: None) -> None:
        super().__init__()
        self._state = state
        self._on_bad_record = on_bad_record
        # ROUTED receipts this worker wrote were counted when it routed; skipping them saves a decode each
        self._own = (H.ROUTER, router_id.encode()) if router_id else None
        self._names = names
        self._kafka = kafka
        self.bad_records = 0

    def wait_loaded(self, timeout: float) -> None:
        """Return once the registry and control topics are read to their ends (the state stays loaded across
        restarts); raise NotReady after `timeout` seconds."""
        if not self._state.ready.wait(timeout):
            raise NotReady(
                f"the router did not finish reading {self._names.registry} and {self._names.control} "
                f"within {timeout:.0f}s{f' ({self.error})' if self.error else ''}; is the broker up and "
                "`reach topics apply` done?"
            )

    def _loop(self) -> None:
        group = f"{self._names.router_app_id}.state.{uuid.uuid4().hex[:8]}"  # never joins nor commits
        consumer = clients.consumer(group, self._kafka, profile="feed")
        try:
            targets = self._assign(consumer)
            self._mark_ready()
            if not targets:
                self._state.ready.set()
            while not self._stop.is_set():
                batch = clients.take(consumer, 500, 0.2)
                if not batch and targets:
                    self._caught_up(consumer, targets)
                for msg in batch:
                    if msg.error():
                        log.warning("state consumer: %s", msg.error())
                        continue
                    topic = msg.topic() or ""
                    if self._own is None or topic != self._names.receipts or self._own not in (msg.headers() or ()):
                        self._dispatch(topic, msg.key(), msg.value())
                    if targets:
                        tp = (msg.topic(), msg.partition())
                        if tp in targets and (msg.offset() or 0) + 1 >= targets[tp]:
                            del targets[tp]
                            if not targets:
                                self._state.ready.set()
        finally:
            consumer.close()

    def _caught_up(self, consumer: Consumer, targets: dict[tuple[str, int], int]) -> None:
        """When idle, a position at or past the target also counts (the tail may be compacted away)."""
        for tp in consumer.position([TopicPartition(t, p) for t, p in targets]):
            if tp.offset >= targets[(tp.topic, tp.partition)]:
                del targets[(tp.topic, tp.partition)]
        if not targets:
            self._state.ready.set()

    def _assign(self, consumer: Consumer) -> dict[tuple[str, int], int]:
        """Assign registry/control/health from the beginning and receipts at their end; return catch-up targets."""
        names = self._names
        meta = consumer.list_topics(timeout=15).topics
        assignment: list[TopicPartition] = []
        targets: dict[tuple[str, int], int] = {}
        for topic in (names.registry, names.control, names.health, names.receipts, names.loads):
            tmeta = meta.get(topic)
            if tmeta is None or tmeta.error is not None:
                if topic == names.loads:  # a namespace from before load reports: heartbeats and receipts still work
                    log.warning("topic %s is missing, so loads come from heartbeats and receipts only; run "
                                "`reach topics apply`", topic)
                    continue
                if topic == names.health:  # a namespace from before health: every instance reads as healthy
                    log.warning("topic %s is missing, so every instance counts as healthy; run `reach topics "
                                "apply`", topic)
                    continue
                raise NotReady(f"topic {topic} is missing; run `reach topics apply`")
            for p in tmeta.partitions:
                low, high = consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=15)
                if topic in (names.receipts, names.loads):
                    assignment.append(TopicPartition(topic, p, high))
                else:
                    assignment.append(TopicPartition(topic, p, OFFSET_BEGINNING))
                    if high > low:
                        targets[(topic, p)] = high
        consumer.assign(assignment)
        return targets

    def _dispatch(self, topic: str, key: bytes | None, value: bytes | None) -> None:
        """Fold one record; a bad one is logged, counted in `bad_records` and skipped (per-record isolation:
        a record left in a compacted topic would otherwise stop every restart the same way)."""
        names = self._names
        try:
            if topic == names.receipts:
                if value is not None:
                    self._receipt(value)
            elif topic == names.registry:
                self._registration(key, value)
            elif topic == names.control:
                if not apply_control(self._state.control, key, value, where=topic):
                    self._bad()
            elif topic == names.loads:
                if value is not None:
                    self._state.loads.report(decode(value, LoadReport))
            elif topic == names.health:
                self._health(key, value)
        except RegistryUnavailable:
            raise  # infrastructure: the loop restarts and reads the compacted topics again
        except Exception as exc:  # noqa: BLE001 - only infrastructure failures may stop the loop
            self._bad()
            log.warning("skipping a bad record on %s (key %r): %r", topic, key, exc)

    def _bad(self) -> None:
        self.bad_records += 1
        self._on_bad_record()

    def _registration(self, key: bytes | None, value: bytes | None) -> None:
        instance_id = (key or b"").decode(errors="replace")
        registration = decode(value, AgentRegistration) if value is not None else None
        if registration is not None:
            try:
                self._names.check_inbox(registration.agent_id, registration.inbox_topic)
                if key != registration.instance_id.encode():  # its tombstone (keyed by its id) would miss it
                    raise InvalidName(f"registry key {key!r} is not the record's instance id "
                                      f"{registration.instance_id!r}")
            except InvalidName:
                self._state.apply_registration(instance_id, None)  # never route to a topic it does not own
                raise
        self._state.apply_registration(instance_id, registration)

    def _health(self, key: bytes | None, value: bytes | None) -> None:
        instance_id = (key or b"").decode(errors="replace")
        record = decode(value, InstanceHealth) if value is not None else None
        if record is not None and record.instance_id != instance_id:
            raise InvalidName(f"health key {key!r} is not the record's instance id {record.instance_id!r}")
        self._state.apply_health(instance_id, record)

    def _receipt(self, value: bytes) -> None:
        receipt: dict[str, Any] = decode_dict("Receipt", value)
        status = receipt["status"]
        key = (receipt["message_id"], receipt.get("generation", 0), receipt.get("attempt", 1))
        if status == Status.ROUTED.value:
            if receipt.get("instance_id"):
                self._state.loads.routed(key, receipt["instance_id"], receipt["at"])
            return
        if status == Status.STARTED.value:
            if receipt.get("instance_id"):
                self._state.loads.started(key, receipt["instance_id"], receipt["at"])
            return
        if status in _FINISHING:
            self._state.loads.finished(key, receipt["at"])
