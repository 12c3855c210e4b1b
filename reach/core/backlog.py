"""A burst queues, it is not shed: when every candidate is full, queue behind the one that starts the request soonest,
as long as the request's budget covers the wait and a typical run; pure, no I/O (docs/decisions/0061).

wait (ms until the request starts) = what must start before it, beyond the instance's handlers
(queue + occupancy + 1 - capacity), at the instance's drain rate. The drain rate is the SDK's measure
(max_concurrency / mean service time, reach.agent.loadreport); before it is measured, the health record's
p50 gives the same quotient; before either, the rate the default queue bound already promises: max_queue
requests started within the delivery timeout (reach.core.loads `default_max_queue`). finish = wait + the
health record's p50 (0 when it has none). The request queues when finish fits in its remaining budget
(deadline - now; no deadline: the default budget). A forward into a queue (`expected_wait_ms` > 0, any forward, not
only past full candidates: in a burst's first moments the router sees handlers free that its own forwards fill) has
its ROUTED receipt's delivery timeout grown to cover its budget (`queued_delivery_timeout_ms`), so the timekeeper
does not reroute a request for waiting in the queue the router put it in.
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


def expected_wait_ms(candidate: Candidate, health: InstanceHealth | None, delivery_timeout_ms: int | None) -> int:
    """ms until a request forwarded to `candidate` starts there (0 when a handler is free or it drains nothing):
    what the ROUTED receipt's delivery timeout grows by, for every forward, since the router's view of a burst's
    first moments shows handlers free that its own forwards already fill."""
    timeout = delivery_timeout_ms or DEFAULT_DELIVERY_TIMEOUT_MS
    wait = start_wait_ms(candidate.load, drain_rate(candidate.load, health, timeout))
    return int(wait or 0)


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
