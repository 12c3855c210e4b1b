"""The router's state: registry, control, health (compacted, from the beginning), receipts, loads (from the end).

The process's feed (reach.streams.feed) reads them, with every other view of the process. Registry and control
rebuild the in-memory views on every start, since the topics are compacted (the state survives in Kafka).
Receipts feed the load tracker and the observed costs (COMPLETED receipts' usage, reach.core.costbook); they are
read from the end (replies to reply_to are the status fold's, which commits what it replied: reach.streams.status).
Load reports are read from the end too: every instance sends one about once a second, so a fresh worker is
current within a second (heartbeats are the base until then).
Health (`<ns>.health`, InstanceHealth keyed by instance_id) is written by the health writers alone
(reach.streams.health); routers only read it into `RouterState.health`.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

from reach.control import ControlView
from reach.core import sessionmap
from reach.core.commits import TopicPart
from reach.core.costbook import CostBook
from reach.core.loads import LoadTracker
from reach.core.views.registryview import RegistryView
from reach.errors import InvalidName
from reach.kafka import headers as H
from reach.kafka.types import Message
from reach.names import Names
from reach.records import TERMINAL, AgentRegistration, InstanceHealth, Status
from reach.settings import KafkaSettings
from reach.streams.exceptions import NotReady
from reach.streams.feed import (
    CONTROL,
    HEALTH,
    LOAD,
    RECEIPT,
    REGISTRATION,
    Decoder,
    Feed,
    Record,
    Start,
    Tail,
    apply_control,
    record_of,
)
from reach.streams.router.affinity import AffinityTable

log = logging.getLogger("reach.router.state")

_FINISHING = frozenset(s.value for s in TERMINAL) | {Status.ATTEMPT_FAILED.value, Status.RETRY_SCHEDULED.value}


class RouterState:
    """The views the hot loop reads: registry, control, loads, health."""

    def __init__(self) -> None:
        self.registry = RegistryView()
        self.control = ControlView()
        self.loads = LoadTracker()
        self.costs = CostBook()  # observed cost per successful call, for the cost factor (0043)
        self.ready = threading.Event()
        self.sessions = AffinityTable()
        """session_key -> instance, written by the routing thread, recovered from the sessions topic here."""
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
            self.costs.forget(instance_id)
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



class StateLoop:
    """Keeps a RouterState current: a view on the process's feed (reach.streams.feed), which it starts with itself
    and which keeps reading while any other view of the process needs it. Without a feed it makes its own."""

    def __init__(self, *, state: RouterState, names: Names, kafka: KafkaSettings, router_id: str | None = None,
                 on_bad_record: Callable[[], None] = lambda: None, feed: Feed | None = None) -> None:
        self._state = state
        self._on_bad_record = on_bad_record
        # ROUTED receipts this worker wrote were counted when it routed; skipping them saves a decode each
        self._own = (H.ROUTER, router_id.encode()) if router_id else None
        self._names = names
        self.feed = feed or Feed(names=names, kafka=kafka)
        self.bad_records = 0
        self.feed.subscribe("router state", [
            Tail(names.registry, Start.BEGINNING, REGISTRATION),
            Tail(names.control, Start.BEGINNING, CONTROL),
            Tail(names.health, Start.BEGINNING, HEALTH, required=False,
                 missing="every instance counts as healthy"),  # a namespace from before health
            Tail(names.receipts, Start.END, RECEIPT, accept=self._foreign),
            Tail(names.loads, Start.END, LOAD, required=False,  # a namespace from before load reports
                 missing="loads come from heartbeats and receipts only"),
            Tail(names.sessions, Start.BEGINNING, SESSION, required=False,  # a namespace from before it
                 missing="session affinity starts empty after a restart"),
        ], self.take, on_loaded=state.ready.set)

    @property
    def error(self) -> BaseException | None:
        return self.feed.error

    def start(self) -> None:
        self.feed.acquire()

    def stop(self, timeout: float | None = None) -> None:
        self.feed.release(timeout)

    def wait_loaded(self, timeout: float) -> None:
        """Return once the registry and control topics are read to their ends (the state stays loaded across
        restarts); raise NotReady after `timeout` seconds."""
        if not self._state.ready.wait(timeout):
            raise NotReady(
                f"the router did not finish reading {self._names.registry} and {self._names.control} "
                f"within {timeout:.0f}s{f' ({self.error})' if self.error else ''}; is the broker up and "
                "`reach topics apply` done?"
            )

    def _foreign(self, msg: Message) -> bool:
        """Not a ROUTED receipt of this worker's (checked on the headers, before anything is decoded)."""
        return self._own is None or self._own not in (msg.headers() or ())

    def take(self, records: list[Record], _reached: Mapping[TopicPart, int]) -> None:
        for record in records:
            self._fold(record)

    def _dispatch(self, topic: str, key: bytes | None, value: bytes | None) -> None:
        """Decode and fold one record (what the feed does for a batch)."""
        self._fold(record_of(topic, key, value, _DECODERS[self._kind(topic)]))

    def _kind(self, topic: str) -> str:
        names = self._names
        return {names.registry: "registry", names.control: "control", names.health: "health",
                names.receipts: "receipts", names.loads: "loads", names.sessions: "sessions"}.get(topic, "")

    def _fold(self, record: Record) -> None:
        """Fold one record; a bad one is logged, counted in `bad_records` and skipped (per-record isolation:
        a record left in a compacted topic would otherwise stop every restart the same way)."""
        kind = self._kind(record.topic)
        try:
            if kind == "control":
                if not apply_control(self._state.control, record):
                    self._bad()
                return
            if record.error is not None:
                raise record.error
            if kind == "receipts":
                if record.decoded is not None:
                    self._receipt(record.decoded)
            elif kind == "registry":
                self._registration(record.key, record.decoded)
            elif kind == "loads":
                if record.decoded is not None:
                    self._state.loads.report(record.decoded)
            elif kind == "health":
                self._health(record.key, record.decoded)
            elif kind == "sessions":
                self._session(record.key_text, record.decoded)
        except Exception as exc:  # noqa: BLE001 - only infrastructure failures may stop the feed
            self._bad()
            log.warning("skipping a bad record on %s (key %r): %r", record.topic, record.key, exc)

    def _bad(self) -> None:
        self.bad_records += 1
        self._on_bad_record()

    def _registration(self, key: bytes | None, registration: AgentRegistration | None) -> None:
        instance_id = (key or b"").decode(errors="replace")
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

    def _health(self, key: bytes | None, record: InstanceHealth | None) -> None:
        instance_id = (key or b"").decode(errors="replace")
        if record is not None and record.instance_id != instance_id:
            raise InvalidName(f"health key {key!r} is not the record's instance id {record.instance_id!r}")
        self._state.apply_health(instance_id, record)

    def _session(self, session_key: str, stick: sessionmap.Record | None) -> None:
        """Where a session stuck (a router's record, before a restart or a rebalance) and the snapshot its handlers
        wrote back (an agent's record); a tombstone forgets it. A
        record not of the tenant its key names (or from before sessions were scoped by tenant) is not learned."""
        if stick is None:
            self._state.sessions.forget(session_key)
        elif stick.belongs(session_key):
            self._state.sessions.learn(session_key, stick.instance_id, stick.seen_at, int(time.time() * 1000),
                                       snapshot=stick.snapshot, snapshot_at=stick.snapshot_at)

    def _receipt(self, receipt: dict[str, Any]) -> None:
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
            usage = receipt.get("usage")
            if status == Status.COMPLETED.value and usage and usage.get("cost_micros") is not None \
                    and receipt.get("instance_id"):
                self._state.costs.add(receipt["instance_id"], receipt["at"], usage["cost_micros"])


SESSION: Decoder = sessionmap.decode_record
_DECODERS: dict[str, Decoder] = {"registry": REGISTRATION, "control": CONTROL, "health": HEALTH, "receipts": RECEIPT,
                                 "loads": LOAD, "sessions": SESSION}
