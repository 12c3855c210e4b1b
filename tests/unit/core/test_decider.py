"""A batch decided by one Decider decides exactly as one `decide` per request would, loads carried from each to the
next (what the router did per record before it decided per batch)."""

from __future__ import annotations

import random

import pytest

from reach.core.candidates import RouteRequest
from reach.core.factors import FactorWeights
from reach.core.loads import InstanceLoad
from reach.core.routing import Decider, Forward, Overload, RouteOutcome, decide
from reach.records import AgentRegistration, BreakerState, CanaryState
from tests.unit.routing_fixtures import canary, health, reg

NOW = 1_000_000

FLEET = [
    reg("a1", region="eu", max_concurrency=3, max_queue=2, partitions=[0, 1]),
    reg("a2", region="us", max_concurrency=4, max_queue=1, partitions=[2], tags=["gpu"]),
    reg("a3", max_concurrency=2, max_queue=2, version="1.3.0", build_version="2.0.0", partitions=[3]),
    reg("a4", max_concurrency=5, max_queue=0, partitions=[4], tenants=["acme"]),
    reg("b1", agent_id="agent://other/main", capability="text.other", max_concurrency=3, max_queue=3),
    reg("b2", agent_id="agent://other/main", capability="text.other", max_concurrency=2, max_queue=3,
        region="eu"),
]
HEALTH = {"a2": health("a2", weight=0.5), "a3": health("a3", admit=0.5, breaker=BreakerState.HALF_OPEN),
          "b2": health("b2", breaker=BreakerState.OPEN, open_until=NOW + 5_000)}


def requests(seed: int, n: int) -> list[RouteRequest]:
    pick = random.Random(seed)
    out = []
    for i in range(n):
        capability = pick.choice(["text.echo", "text.echo", "text.echo", "text.other", "text.none"])
        out.append(RouteRequest(
            message_id=f"m{i}", capability=capability, deadline=NOW + pick.choice([-1, *[10_000] * 5]),
            tenant=pick.choice(["default", "acme"]), region=pick.choice([None, None, "eu", "us"]),
            session_key=pick.choice([None, None, "s1", "s2"]), tags=pick.choice([(), (), ("gpu",)]),
            version_range=pick.choice(["*", "*", "^1.3"]), excluded_instances=pick.choice([frozenset(),
                                                                                         frozenset({"a1"})]),
            priority=pick.choice([0, 0, 2]), canary=pick.random() < 0.1))
    return out


def key(outcome: RouteOutcome) -> object:
    if isinstance(outcome, Forward):
        d = outcome.decision
        return ("forward", d.picked_instance, d.scores, d.reason, d.arm, outcome.topic, outcome.partition,
                outcome.admission, outcome.timeout_factor)
    if isinstance(outcome, Overload):
        return ("overload", outcome.retry_after_ms, outcome.scores, outcome.message)
    return outcome


@pytest.mark.parametrize("seed", range(8))
def test_a_batch_decides_as_one_decide_per_request_would(seed: int) -> None:
    canaries = {"agent://echo/main": canary(steps=[50], state=CanaryState.RUNNING)} if seed % 2 else {}
    weights = FactorWeights({"fit": 0.4, "load": 0.3, "affinity": 0.1 * (seed % 3), "locality": 0.2, "cost": 0.1,
                             "priority": 0.1, "health": 0.2})
    by_capability: dict[str, tuple[AgentRegistration, ...]] = {}
    for r in FLEET:
        by_capability[r.capabilities[0].name] = (*by_capability.get(r.capabilities[0].name, ()), r)
    start = {"a1": InstanceLoad(3, 0, 3, 2), "a2": InstanceLoad(4, 0, 4, 1, drain_rate=2.0),
             "a3": InstanceLoad(2, 1, 2, 2), "b1": InstanceLoad(2, 2, 3, 3, drain_rate=5.0)}
    affinity = {"s1": "a2", "s2": "b1"}
    batch = requests(seed, 60)

    loads = dict(start)
    expected = []
    rng = random.Random(seed)
    for request in batch:
        outcome = decide(request, by_capability.get(request.capability, ()), weights=weights, now_ms=NOW,
                         loads=loads, health=HEALTH, canaries=canaries, rng=rng, costs={"a1": 2_000.0},
                         affinity={request.session_key: affinity[request.session_key]} if request.session_key
                         else None)
        if isinstance(outcome, Forward):
            loads[outcome.instance.instance_id] = outcome.decision.picked.load.plus_routed()
        expected.append(key(outcome))

    decider = Decider(now_ms=NOW, loads=dict(start), health=HEALTH, canaries=canaries, rng=random.Random(seed),
                      costs={"a1": 2_000.0})
    got = [key(decider.decide(request, by_capability.get(request.capability, ()), weights=weights,
                              affinity={request.session_key: affinity[request.session_key]} if request.session_key
                              else None))
           for request in batch]
    assert got == expected
    assert {k[0] for k in got if isinstance(k, tuple)} == {"forward", "overload"}, "both as the queues fill"
    assert decider.loads != start, "the batch's forwards are counted in its loads"


def test_a_strict_and_a_loose_request_of_one_shape_are_matched_apart_in_one_batch() -> None:
    """The Decider caches a batch's matches per request shape: strict_tags is part of the shape (a loose request
    decided first must not let a strict one fall back to an untagged instance)."""
    from reach.core.candidates import RouteRequest
    from reach.core.routing import Decider, Forward, NoRoute
    from reach.records import Weights
    from tests.unit.routing_fixtures import reg

    untagged = [reg("plain")]
    decider = Decider(now_ms=1_000_000)
    loose = RouteRequest(message_id="m1", capability="text.echo", tags=("gpu",), deadline=1_010_000)
    strict = loose._replace(message_id="m2", strict_tags=True)
    assert isinstance(decider.decide(loose, untagged, weights=Weights()), Forward)
    assert isinstance(decider.decide(strict, untagged, weights=Weights()), NoRoute)
