"""A burst queues, it is not shed: when every candidate is full, queue behind the one that starts the request soonest,
as long as the request's budget covers the wait and a typical run; pure, no I/O (docs/decisions/0061).

wait (ms until the request starts) = what must start before it, beyond the instance's handlers
(queue + occupancy + 1 - capacity), at the instance's drain rate. The drain rate is the SDK's measure
(max_concurrency / mean service time, reach.agent.loadreport); before it is measured, the health record's
p50 gives the same quotient; before either, the rate the default queue bound already promises: max_queue
requests started within the delivery timeout (reach.core.loads `default_max_queue`). finish = wait + the
health record's p50 (0 when it has none). The request queues when finish fits in its remaining budget
(deadline - now; no deadline: the default budget). A forward into a queue (an estimated wait > 0, any forward, not
only past full candidates: in a burst's first moments the router sees handlers free that its own forwards fill) has
its ROUTED receipt's delivery timeout grown to cover its budget (`queued_delivery_timeout_ms`), so the timekeeper
does not reroute a request for waiting in the queue the router put it in. However short the estimate, the growth
stays: an inbox is several partitions, and requests estimated to start within 500 ms started 6.3 s after ROUTED
(a 500 ms floor rerouted 6 of 80 requests of the burst test). `Waits` is the forward path's part: one per batch (the
Decider's), it computes each instance's drain rate once per batch and returns at once for a forward to an
instance with a free handler.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import NamedTuple

from reach.core.candidates import Candidate
from reach.core.loads import InstanceLoad
from reach.core.timeouts import DEFAULT_BUDGET_MS, DEFAULT_DELIVERY_TIMEOUT_MS
from reach.records import InstanceHealth


class Queued(NamedTuple):
    """The full candidate a request queues behind, and the estimated ms until it starts there."""

    candidate: Candidate
    wait_ms: int


def drain_rate(load: InstanceLoad, health: InstanceHealth | None, delivery_timeout_ms: int) -> float:
    """Requests per second the instance starts while all its handlers are busy: measured, else max_concurrency /
    p50, else the rate its queue bound assumes (max_queue, at least max_concurrency, per delivery timeout)."""
    if load.drain_rate is not None:
        return load.drain_rate
    capacity = max(load.capacity, 1)
    if health is not None and health.p50_ms:
        return capacity * 1000 / health.p50_ms
    return max(load.max_queue, capacity) * 1000 / max(delivery_timeout_ms, 1)


def start_wait_ms(load: InstanceLoad, rate: float) -> float | None:
    """ms until one more request starts on the instance at `rate`; None when it drains nothing (rate 0)."""
    ahead = max(load.queue + load.occupancy + 1 - max(load.capacity, 1), 0)
    if ahead == 0:
        return 0.0
    return None if rate <= 0 else 1000 * ahead / rate


class Waits:
    """The queue waits of one batch's forwards: each instance's drain rate once per batch (it reads only what the
    batch's view and health records say, which a forward does not change), the wait in O(1) per forward."""

    __slots__ = ("_health", "_rates")

    def __init__(self, health: Mapping[str, InstanceHealth]) -> None:
        self._health = health
        self._rates: dict[tuple[str, int], float] = {}

    def delivery_timeout_ms(self, candidate: Candidate, asked_ms: int | None, budget_left_ms: int) -> int | None:
        """The ROUTED receipt's delivery timeout for a forward to `candidate` (`queued_delivery_timeout_ms`); None:
        the request's own (a handler is free, or the instance drains nothing)."""
        load = candidate.load
        ahead = load.queue + load.occupancy + 1 - max(load.capacity, 1)
        if ahead <= 0 or not asked_ms:
            return None
        key = (candidate.instance_id, asked_ms)
        rate = self._rates.get(key)
        if rate is None:
            rate = self._rates[key] = drain_rate(load, self._health.get(candidate.instance_id), asked_ms)
        wait = int(1000 * ahead / rate) if rate > 0 else 0
        return queued_delivery_timeout_ms(asked_ms, wait, budget_left_ms) if wait > 0 else None


def queue_behind(candidates: Iterable[Candidate], *, budget_ms: int, health: Mapping[str, InstanceHealth],
                 delivery_timeout_ms: int | None) -> Queued | None:
    """The full candidate whose queue starts the request soonest, when it also finishes there within `budget_ms`;
    None when no candidate can meet the budget (the request ends OVERLOAD)."""
    timeout = delivery_timeout_ms or DEFAULT_DELIVERY_TIMEOUT_MS
    best: Queued | None = None
    for candidate in candidates:
        h = health.get(candidate.instance_id)
        wait = start_wait_ms(candidate.load, drain_rate(candidate.load, h, timeout))
        if wait is None or wait + ((h.p50_ms or 0) if h is not None else 0) > budget_ms:
            continue
        if best is None or wait < best.wait_ms:
            best = Queued(candidate, int(wait))
    return best


def remaining_budget_ms(deadline: int | None, now_ms: int) -> int:
    """What is left of the request's budget: deadline - now, or the default budget when it has no deadline."""
    return DEFAULT_BUDGET_MS if deadline is None else deadline - now_ms


def queued_delivery_timeout_ms(asked_ms: int | None, wait_ms: int, budget_left_ms: int | None) -> int | None:
    """The ROUTED receipt's delivery timeout (ROUTED -> STARTED, the timekeeper's) for a request forwarded into a
    queue (`wait_ms` > 0): its own plus the wait, and at least what is left of its budget. The inbox is several
    partitions, not one line, so requests routed after it may start before it: its own turn cannot be estimated,
    but the router queues nothing the budget does not cover, so it starts within its budget or ends EXPIRED. Not
    queued, or no delivery timeout set: the request's own."""
    if not asked_ms or wait_ms <= 0:
        return asked_ms
    return max(asked_ms + wait_ms, budget_left_ms or 0)
