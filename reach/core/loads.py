"""The load model: what each instance runs (occupancy) and what waits for it (queue); pure, no Kafka.

- occupancy = handlers running. The SDK reports it (`<ns>.loads`, about once a second and on every
  change of more than 10% of max_concurrency); between reports the tracker adds messages STARTED
  after the report and subtracts those the report counted that finished since. Report and STARTED
  receipt carry the agent's own clock, so "after the report" is exact: a message is counted once.
  A heartbeat (its `inflight`) is a base too, for instances that never sent a report.
- queue = messages ROUTED to the instance and not yet STARTED, counted from the routing decisions
  and receipts; at least the SDK's reported backlog (which covers a router that started after the
  messages were routed). A report does not re-base the queue: it cannot see what is still in the
  inbox partitions (in flight, or held back once the SDK's backlog reached its bound).

Queue time is not occupancy, so an idle instance never looks busy because the router read its
receipts late (the Little's-law failure of the previous model: docs/decisions/0005-load-model.md).
Thread-safe: the router's hot loop and its state loop both touch the tracker.
"""

from __future__ import annotations

import threading
from collections import OrderedDict, deque
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import NamedTuple

from reach.records import AgentRegistration, LoadReport

MessageKey = tuple[str, int, int]  # (message_id, generation, attempt)

BUSY_RATIO = 0.8
"""An instance sheds only when its occupancy is above this share of max_concurrency (and its queue is full)."""

MIN_RETRY_AFTER_MS = 100
MAX_RETRY_AFTER_MS = 60_000
UNMEASURED_RETRY_AFTER_MS = 1_000
"""The OVERLOAD hint while no candidate has measured its drain rate yet (its first seconds of life)."""

QUEUE_PER_HANDLER = 4
"""The default queue bound before a drain rate is known: 4 requests waiting per handler."""

STALE_AFTER_MS = 600_000
"""Tracked messages older than this are forgotten (a receipt that never came must not leak memory)."""

FORGET_AFTER_MS = STALE_AFTER_MS
"""An instance with no report, heartbeat or message newer than this (or twice its TTL, if longer) is forgotten:
one killed without a registry tombstone (SIGKILL) must not keep its entry and queued messages forever."""

PRUNE_EVERY_MS = 10_000
"""How often `view(now_ms=...)` looks for forgotten instances (a scan of the tracked instances)."""

_RECENT = 10_000  # finishes kept per instance between two re-bases (bounded for instances never re-based)


class InstanceLoad(NamedTuple):
    """One instance's load as the router sees it now (a NamedTuple: one per instance per batch)."""

    occupancy: int
    queue: int
    capacity: int
    max_queue: int
    drain_rate: float | None = None

    @classmethod
    def of(cls, registration: AgentRegistration) -> InstanceLoad:
        """The load a heartbeat alone tells: its inflight, no queue known."""
        return cls(registration.inflight, 0, registration.max_concurrency, registration.max_queue)

    @property
    def ratio(self) -> float:
        """(occupancy + queue) / (max_concurrency + max_queue), clipped to [0, 1]: the score's load term."""
        room = max(self.capacity + self.max_queue, 1)
        return min(max((self.occupancy + self.queue) / room, 0.0), 1.0)

    @property
    def full(self) -> bool:
        """Busy (occupancy above 80% of max_concurrency) and its queue at its bound: shed to others.

        Both, because the router reads receipts late: its queue count runs ahead of the truth by
        rate x lag, while its occupancy runs behind. An instance seen with free handlers is not shed,
        since what was routed to it meanwhile is most likely running already."""
        return self.occupancy > BUSY_RATIO * max(self.capacity, 1) and self.queue >= self.max_queue

    def plus_routed(self) -> InstanceLoad:
        """The same load with one more request queued (the router's own decision, within a batch)."""
        return InstanceLoad(self.occupancy, self.queue + 1, self.capacity, self.max_queue, self.drain_rate)


def retry_after_ms(loads: Iterable[InstanceLoad]) -> int:
    """When to retry an OVERLOAD: the soonest any candidate drains its queue excess, clamped.

    excess = queue - max_queue + 1 (what must drain before one more fits); wait = excess / drain_rate.
    A candidate that drains nothing (rate 0) waits the maximum; none measured yet -> the unmeasured hint."""
    waits: list[float] = []
    for load in loads:
        if load.drain_rate is None:
            continue
        excess = max(load.queue - load.max_queue + 1, 1)
        waits.append(MAX_RETRY_AFTER_MS if load.drain_rate <= 0 else 1000 * excess / load.drain_rate)
    if not waits:
        return UNMEASURED_RETRY_AFTER_MS
    return int(min(max(min(waits), MIN_RETRY_AFTER_MS), MAX_RETRY_AFTER_MS))


def default_max_queue(max_concurrency: int, drain_rate: float | None, delivery_timeout_ms: int) -> int:
    """min(4 x max_concurrency, delivery timeout x drain rate): a queued request does not outlive its
    delivery timeout at the rate the instance completes work; 4 x max_concurrency while not measured."""
    bound = QUEUE_PER_HANDLER * max_concurrency
    if drain_rate is None:
        return bound
    return min(bound, int(delivery_timeout_ms / 1000 * drain_rate))


@dataclass(slots=True)
class _Entry:
    instance_id: str
    running: bool
    at: int  # routed at (router clock) while queued; STARTED at (agent clock) once running


@dataclass(slots=True)
class _Instance:
    base_at: int = -1  # the newest report or heartbeat (agent clock)
    seen_at: int = -1  # the newest report, heartbeat or message of the instance (agent or router clock)
    ttl_ms: int = 0
    base_occupancy: int = 0
    base_finished: int = 0  # of the messages the base counted as running, how many finished since
    running_new: int = 0  # running messages STARTED after the base
    queued: int = 0
    report: LoadReport | None = None
    entries: dict[MessageKey, _Entry] = field(default_factory=dict)
    # (started, finished) of messages that finished after the base: a report read after their receipts
    # counted them running, and re-basing on it must subtract them
    recent: deque[tuple[int, int]] = field(default_factory=lambda: deque(maxlen=_RECENT))

    def occupancy(self) -> int:
        return max(self.base_occupancy - self.base_finished, 0) + self.running_new


class LoadTracker:
    """Occupancy and queue per instance from load reports, heartbeats, routing decisions and receipts."""

    def __init__(self, *, remember_finished: int = 100_000, stale_after_ms: int = STALE_AFTER_MS,
                 forget_after_ms: int = FORGET_AFTER_MS) -> None:
        self._lock = threading.Lock()
        self._instances: dict[str, _Instance] = {}
        self._where: dict[MessageKey, str] = {}
        self._finished: OrderedDict[MessageKey, None] = OrderedDict()
        self._remember = remember_finished
        self._stale_after = stale_after_ms
        self._forget_after = forget_after_ms
        self._pruned_at: int | None = None

    # -- events ----------------------------------------------------------------------------------------

    def routed(self, key: MessageKey, instance_id: str, at_ms: int) -> None:
        """A routing decision (this worker's, or another's ROUTED receipt)."""
        with self._lock:
            if key in self._finished:
                return  # its terminal receipt overtook the ROUTED receipt
            current = self._entry(key)
            if current is not None and current.running:
                return  # its STARTED receipt overtook the ROUTED receipt
            self._drop(key)
            self._add(key, _Entry(instance_id, running=False, at=at_ms))

    def routed_many(self, routes: Iterable[tuple[MessageKey, str]], at_ms: int) -> None:
        """The routing decisions of one batch of this worker's, (message key, instance_id) each: `routed` for each,
        under one hold of the lock."""
        with self._lock:
            finished = self._finished
            for key, instance_id in routes:
                if key in finished:
                    continue
                current = self._entry(key)
                if current is not None and current.running:
                    continue
                self._drop(key)
                self._add(key, _Entry(instance_id, running=False, at=at_ms))

    def started(self, key: MessageKey, instance_id: str, at_ms: int) -> None:
        """A STARTED receipt: the message leaves the queue and occupies a handler of `instance_id`."""
        with self._lock:
            if key in self._finished:
                return
            self._drop(key)
            self._add(key, _Entry(instance_id, running=True, at=at_ms))

    def finished(self, key: MessageKey, at_ms: int) -> None:
        """A terminal, ATTEMPT_FAILED or RETRY_SCHEDULED receipt: the message holds nothing any more."""
        with self._lock:
            entry = self._drop(key)
            if entry is not None and entry.running:
                inst = self._instances[entry.instance_id]
                if entry.at <= inst.base_at < at_ms:
                    inst.base_finished += 1  # the base counted it running; it finished after the base
                if at_ms > inst.base_at:
                    inst.recent.append((entry.at, at_ms))
            self._finished[key] = None
            if len(self._finished) > self._remember:
                self._finished.popitem(last=False)

    def report(self, report: LoadReport) -> None:
        """A load report from the SDK: re-bases the instance's occupancy at `report.at`."""
        with self._lock:
            inst = self._instances.setdefault(report.instance_id, _Instance())
            if inst.report is not None and report.at < inst.report.at:
                return
            inst.report = report
            self._rebase(inst, report.at, report.inflight)

    def heartbeat(self, registration: AgentRegistration) -> None:
        """A registration: its inflight re-bases occupancy when it is newer than the last report."""
        with self._lock:
            inst = self._instances.setdefault(registration.instance_id, _Instance())
            inst.ttl_ms = registration.ttl_ms
            self._rebase(inst, registration.heartbeat_at, registration.inflight)

    def forget(self, instance_id: str) -> None:
        """The instance left (a registry tombstone)."""
        with self._lock:
            self._forget(instance_id)

    # -- the view --------------------------------------------------------------------------------------

    def view(self, registrations: Iterable[AgentRegistration], *, now_ms: int | None = None) -> dict[str, InstanceLoad]:
        """instance_id -> its load now, for each registration; with `now_ms`, every PRUNE_EVERY_MS it also
        forgets instances silent for FORGET_AFTER_MS (or twice their TTL)."""
        with self._lock:
            if now_ms is not None and (self._pruned_at is None or now_ms - self._pruned_at >= PRUNE_EVERY_MS):
                self._pruned_at = now_ms
                for instance_id in [i for i, inst in self._instances.items()
                                    if now_ms - inst.seen_at > max(self._forget_after, 2 * inst.ttl_ms)]:
                    self._forget(instance_id)
            out: dict[str, InstanceLoad] = {}
            for reg in registrations:
                inst = self._instances.get(reg.instance_id)
                if inst is None:
                    out[reg.instance_id] = InstanceLoad.of(reg)
                    continue
                report = inst.report
                queue = max(inst.queued, report.queued if report is not None else 0)
                # the newer of report and heartbeat says how many handlers the instance has
                newer = report is not None and report.at >= reg.heartbeat_at
                capacity = report.capacity if report is not None and newer else reg.max_concurrency
                # the SDK never runs more than its capacity: more means receipts read late, not work
                out[reg.instance_id] = InstanceLoad(
                    min(inst.occupancy(), capacity), queue, capacity,
                    report.max_queue if report is not None else reg.max_queue,
                    report.drain_rate if report is not None else None,
                )
            return out

    def on_demand(self, registrations: Mapping[str, AgentRegistration], *, now_ms: int | None = None) -> LoadsOnDemand:
        """Like `view`, for instance_id -> registration, but each load is read when first asked for: a batch
        reads its capabilities' candidates, not the whole fleet's (decision 0068). Prunes as `view` does."""
        self.view((), now_ms=now_ms)
        return LoadsOnDemand(self, registrations)

    def tracked(self) -> int:
        """How many instances the tracker holds (bounded by the fleet seen within FORGET_AFTER_MS)."""
        with self._lock:
            return len(self._instances)

    def load(self, registration: AgentRegistration) -> InstanceLoad:
        """One instance's load now."""
        return self.view([registration])[registration.instance_id]

    # -- internals (under the lock) ----------------------------------------------------------------------

    def _forget(self, instance_id: str) -> None:
        inst = self._instances.pop(instance_id, None)
        for key in inst.entries if inst is not None else ():
            self._where.pop(key, None)

    def _rebase(self, inst: _Instance, at: int, occupancy: int) -> None:
        inst.seen_at = max(inst.seen_at, at)
        if at < inst.base_at:
            return
        inst.base_at, inst.base_occupancy = at, occupancy
        inst.recent = deque((r for r in inst.recent if r[1] > at), maxlen=_RECENT)
        inst.base_finished = sum(1 for started, _ in inst.recent if started <= at)
        stale = [k for k, e in inst.entries.items() if e.at < at - self._stale_after]
        for key in stale:
            self._drop(key)
        inst.running_new = sum(1 for e in inst.entries.values() if e.running and e.at > at)

    def _entry(self, key: MessageKey) -> _Entry | None:
        where = self._where.get(key)
        return None if where is None else self._instances[where].entries.get(key)

    def _add(self, key: MessageKey, entry: _Entry) -> None:
        inst = self._instances.setdefault(entry.instance_id, _Instance())
        inst.seen_at = max(inst.seen_at, entry.at)
        inst.entries[key] = entry
        self._where[key] = entry.instance_id
        if not entry.running:
            inst.queued += 1
        elif entry.at > inst.base_at:
            inst.running_new += 1

    def _drop(self, key: MessageKey) -> _Entry | None:
        where = self._where.pop(key, None)
        if where is None:
            return None
        inst = self._instances[where]
        entry = inst.entries.pop(key)
        if not entry.running:
            inst.queued -= 1
        elif entry.at > inst.base_at:
            inst.running_new -= 1
        return entry


class LoadsOnDemand(dict[str, InstanceLoad]):
    """instance_id -> load now (LoadTracker.on_demand), read from the tracker on the first `get`; a value set by
    the reader (a decision's routed request) stays. Only `get`, `[]` and `in` know the unread instances."""

    def __init__(self, tracker: LoadTracker, registrations: Mapping[str, AgentRegistration]) -> None:
        super().__init__()
        self._tracker = tracker
        self._registrations = registrations

    def get(self, key: str, default: InstanceLoad | None = None) -> InstanceLoad | None:  # type: ignore[override]
        found = super().get(key)
        if found is None:
            registration = self._registrations.get(key)
            if registration is None:
                return default
            found = self[key] = self._tracker.load(registration)
        return found

    def __getitem__(self, key: str) -> InstanceLoad:
        found = self.get(key)
        if found is None:
            raise KeyError(key)
        return found

    def __contains__(self, key: object) -> bool:
        return super().__contains__(key) or key in self._registrations

    def __bool__(self) -> bool:
        return bool(self._registrations) or super().__len__() > 0
