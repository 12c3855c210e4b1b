"""A burst queues, it is not shed (reach.core.backlog): every candidate full -> queue behind the soonest start while
the budget covers it; OVERLOAD only when no candidate can meet the budget."""

from __future__ import annotations

import random

from reach.core.backlog import queue_behind, queued_delivery_timeout_ms
from reach.core.candidates import Candidate, RouteRequest
from reach.core.loads import InstanceLoad
from reach.core.routing import Decider, Forward, Overload, decide
from reach.core.versions import Version
from reach.envelopes import BUDGET_MS
from reach.records import AgentRegistration, InstanceHealth, Weights
from tests.unit.routing_fixtures import reg

NOW = 1_000_000


def req(budget_ms: int | None, **kw: object) -> RouteRequest:
    deadline = None if budget_ms is None else NOW + budget_ms
    fields: dict[str, object] = {"message_id": "m1", "capability": "text.echo", "deadline": deadline,
                                 "delivery_timeout_ms": 5_000, **kw}
    return RouteRequest(**fields)  # type: ignore[arg-type]


def four(instance_id: str, qps_limit: float | None = None) -> AgentRegistration:
    return reg(instance_id, max_concurrency=4, max_queue=16, qps_limit=qps_limit)


def run(request: RouteRequest, *regs: object, **kw: object) -> object:
    return decide(request, regs, weights=Weights(), now_ms=NOW, rng=random.Random(0), **kw)  # type: ignore


def full(queue: int, rate: float | None) -> InstanceLoad:
    return InstanceLoad(4, queue, 4, 16, drain_rate=rate)


def p50(instance_id: str, ms: float) -> InstanceHealth:
    return InstanceHealth(instance_id=instance_id, agent_id="agent://echo/main", at=0, p50_ms=ms)


def test_every_candidate_full_and_a_budget_that_covers_the_wait_forwards_to_the_soonest_start() -> None:
    # a starts it after 21 requests at 4/s (5.25 s), b after 17 at 8/s (2.125 s)
    loads = {"a": full(20, 4.0), "b": full(16, 8.0)}
    out = run(req(10_000), four("a"), four("b"), loads=loads)
    assert isinstance(out, Forward)
    assert out.instance.instance_id == "b" and out.delivery_timeout_ms == 10_000


def test_a_budget_no_candidate_can_meet_ends_overload_with_the_drain_based_retry_after() -> None:
    loads = {"a": full(20, 4.0), "b": full(16, 8.0)}
    out = run(req(2_000), four("a"), four("b"), loads=loads)
    assert isinstance(out, Overload)
    assert out.retry_after_ms == 125, "b frees one place of its queue in 1 / 8.0 s"
    assert "b running 4/4, queue 16/16, draining 8/s" in out.message


def test_the_typical_run_time_counts_toward_the_finish() -> None:
    loads = {"a": full(16, 8.0)}  # starts in 2.125 s
    health = {"a": p50("a", 1_000)}
    assert isinstance(run(req(3_200), four("a"), loads=loads, health=health), Forward)
    assert isinstance(run(req(3_200), four("a"), loads=loads, health={"a": p50("a", 1_500)}), Overload)


def test_an_instance_that_drains_nothing_is_not_queued_behind() -> None:
    out = run(req(60_000), four("a"), loads={"a": full(16, 0.0)})
    assert isinstance(out, Overload)


def test_unmeasured_drain_comes_from_the_p50_else_from_what_the_queue_bound_promises() -> None:
    registration = four("a")
    candidate = Candidate(registration, registration.capabilities[0], Version(1, 2, 0), full(16, None))
    # p50 400 ms over 4 handlers: 10/s, 17 ahead -> 1.7 s to start, 2.1 s to finish
    by_p50 = queue_behind([candidate], budget_ms=2_100, health={"a": p50("a", 400)}, delivery_timeout_ms=5_000)
    assert by_p50 is not None and by_p50.wait_ms == 1_700
    assert queue_behind([candidate], budget_ms=2_099, health={"a": p50("a", 400)}, delivery_timeout_ms=5_000) is None
    # neither: max_queue (16) started within the delivery timeout (5 s): 3.2/s, 17 ahead -> 5.3 s
    bound = queue_behind([candidate], budget_ms=6_000, health={}, delivery_timeout_ms=5_000)
    assert bound is not None and bound.wait_ms == 5_312


def test_no_deadline_gets_the_default_budget() -> None:
    loads = {"a": full(16, 1.0)}  # 17 s to start: within the default 45 s budget; 45 more are not
    assert isinstance(run(req(None), four("a"), loads=loads), Forward)
    loads = {"a": full(16 + BUDGET_MS // 1000, 1.0)}
    assert isinstance(run(req(None), four("a"), loads=loads), Overload)


def test_a_batch_queues_until_the_budget_no_longer_covers_the_wait_then_sheds() -> None:
    decider = Decider(now_ms=NOW, loads={"a": full(16, 4.0)}, rng=random.Random(0))
    registrations = (four("a"),)
    outcomes = [decider.decide(req(6_000, message_id=f"m{i}"), registrations, weights=Weights()) for i in range(12)]
    # 17 ahead at 4/s start in 4.25 s; each forward adds one: the 8th starts in 6.0 s, the 9th would in 6.25 s
    assert [type(o) for o in outcomes] == [Forward] * 8 + [Overload] * 4


def test_an_instance_over_its_qps_limit_is_not_queued_behind() -> None:
    out = run(req(60_000), four("a", qps_limit=4.0), throttled={"a": 250})
    assert isinstance(out, Overload) and out.retry_after_ms == 250


def test_a_forward_into_a_queue_gets_a_delivery_timeout_that_covers_its_budget() -> None:
    assert queued_delivery_timeout_ms(5_000, 2_125, 30_000) == 30_000
    assert queued_delivery_timeout_ms(5_000, 2_125, 1_000) == 7_125, "never shorter than its own plus the wait"
    assert queued_delivery_timeout_ms(5_000, 0, 30_000) == 5_000, "a handler is free: its own"
    assert queued_delivery_timeout_ms(None, 2_125, 30_000) is None, "not set stays not set"
    queued = run(req(10_000), four("a"), loads={"a": full(16, 8.0)})
    assert isinstance(queued, Forward) and queued.delivery_timeout_ms == 10_000
    free = run(req(10_000), four("a"), loads={"a": InstanceLoad(3, 0, 4, 16, drain_rate=8.0)})
    assert isinstance(free, Forward) and free.delivery_timeout_ms is None



def test_every_forward_of_a_batch_into_a_queue_gets_the_budget_however_short_its_wait() -> None:
    """An inbox is several partitions: a request estimated to start within a few ms may start seconds later, so
    the ROUTED receipt's delivery timeout covers the budget for any forward that waits at all; a forward to a free
    handler keeps the request's own."""
    decider = Decider(now_ms=NOW, loads={"a": InstanceLoad(1, 0, 4, 16, drain_rate=400.0)}, rng=random.Random(0))
    registrations = (four("a"),)
    outcomes = [decider.decide(req(10_000, message_id=f"m{i}"), registrations, weights=Weights()) for i in range(8)]
    timeouts = [o.delivery_timeout_ms for o in outcomes if isinstance(o, Forward)]
    # 1 running of 4: the first three forwards find a free handler, the fourth on wait (2.5 ms, 5 ms, ...)
    assert timeouts == [None] * 3 + [10_000] * 5
