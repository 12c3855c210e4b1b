"""The decide function: each outcome value and the bad-input checks."""

from __future__ import annotations

import random

from reach.core.candidates import RouteRequest
from reach.core.loads import UNMEASURED_RETRY_AFTER_MS, InstanceLoad
from reach.core.routing import (
    Expired,
    Forward,
    NoRoute,
    Overload,
    Reject,
    Unavailable,
    decide,
    inbox_partition,
    parse_request,
)
from reach.core.versions import satisfies, within_line
from reach.records import BreakerState, CanaryState, Weights
from tests.unit.routing_fixtures import canary, health, reg

NOW = 1_000_000


def req(**kw: object) -> RouteRequest:
    base: dict[str, object] = {"message_id": "m1", "capability": "text.echo", "deadline": NOW + 10_000}
    base.update(kw)
    return RouteRequest(**base)  # type: ignore[arg-type]


def run(request: RouteRequest, *regs: object, **kw: object) -> object:
    return decide(request, regs, weights=Weights(), now_ms=NOW, rng=random.Random(0), **kw)  # type: ignore


def test_forward_to_an_owned_partition() -> None:
    out = run(req(), reg("a", partitions=[3, 5]))
    assert isinstance(out, Forward)
    assert out.topic == "ns.agent.echo.main" and out.partition in (3, 5)
    assert out.decision.picked_instance == "a"


def test_session_key_maps_to_a_stable_partition() -> None:
    r = reg("a", partitions=[0, 1, 2, 3])
    assert len({inbox_partition(r, "session-9") for _ in range(10)}) == 1


def test_overload_when_all_above_threshold_and_the_budget_does_not_cover_the_queue() -> None:
    # unmeasured: each drains the rate its queue bound assumes, 10 per 5 s delivery timeout, so 500 ms to start
    out = run(req(deadline=NOW + 400), reg("a", inflight=10), reg("b", inflight=10))
    assert isinstance(out, Overload) and len(out.scores) == 2
    assert out.retry_after_ms == UNMEASURED_RETRY_AFTER_MS, "no drain rate measured yet"
    assert "a running 10/10, queue 0/0, draining not measured yet" in out.message
    queued = run(req(deadline=NOW + 600), reg("a", inflight=10), reg("b", inflight=10))
    assert isinstance(queued, Forward), "a budget that covers the wait queues"


def test_overload_retry_after_comes_from_the_soonest_drain() -> None:
    loads = {"a": InstanceLoad(4, 20, 4, 16, drain_rate=4.0), "b": InstanceLoad(4, 16, 4, 16, drain_rate=2.0)}
    out = run(req(deadline=NOW + 5_000), reg("a", max_concurrency=4, max_queue=16),
              reg("b", max_concurrency=4, max_queue=16), loads=loads)
    assert isinstance(out, Overload), "a starts it in 21 / 4.0 s, b in 17 / 2.0 s: neither within 5 s"
    assert out.retry_after_ms == 500, "b frees one place in 1 / 2.0 s; a needs 5 / 4.0 s"
    assert "draining 4/s" in out.message and "queue 20/16" in out.message


def test_no_route_unroutable_or_dead_letter() -> None:
    out = run(req(capability="nobody.serves"), reg("a"))
    assert isinstance(out, NoRoute) and not out.dead_letter
    out = run(req(capability="nobody.serves", expire_at=NOW + 60_000), reg("a"))
    assert isinstance(out, NoRoute) and out.dead_letter
    out = run(req(version_range="^2"), reg("a", version="1.2.0"))
    assert isinstance(out, NoRoute)


def test_expired_budget() -> None:
    assert isinstance(run(req(deadline=NOW - 1), reg("a")), Expired)


def test_parse_request_rejects_bad_input() -> None:
    base = {"message_id": "m", "capability": "text.echo", "capability_version": "^1.2"}
    assert isinstance(parse_request(base), RouteRequest)
    empty = parse_request({**base, "capability": ""})
    assert isinstance(empty, Reject) and empty.code == "EMPTY_CAPABILITY"
    bad = parse_request({**base, "capability_version": "not a range"})
    assert isinstance(bad, Reject) and bad.code == "BAD_VERSION_RANGE"
    assert isinstance(parse_request({**base, "capability": "Bad Name"}), Reject)


def test_validate_at_router_checks_picked_input_schema() -> None:
    r = reg("a")
    schema = '{"type": "object", "required": ["text"]}'
    caps = [r.capabilities[0].model_copy(update={"input_schema": schema})]
    strict = r.model_copy(update={"capabilities": caps})
    ok = run(req(), strict, payload=b'{"text": "hi"}')
    assert isinstance(ok, Forward)
    bad = run(req(), strict, payload=b'{"nope": 1}')
    assert isinstance(bad, Reject) and bad.code == "INVALID_INPUT" and "text" in bad.message


# -- health, admission, canary -----------------------------------------------------------------------


def test_every_candidate_open_is_unavailable_until_the_first_open_until() -> None:
    states = {"a": health("a", breaker=BreakerState.OPEN, open_until=NOW + 30_000),
              "b": health("b", breaker=BreakerState.OPEN, open_until=NOW + 12_000)}
    out = run(req(), reg("a"), reg("b"), health=states)
    assert isinstance(out, Unavailable) and out.retry_after_ms == 12_000
    assert "circuit breaker" in out.message and "a, b" in out.message


def test_an_open_instance_gets_no_retry_either() -> None:
    states = {"sick": health("sick", breaker=BreakerState.OPEN, open_until=NOW + 30_000)}
    out = run(req(attempt=2, excluded_instances=frozenset({"well"})), reg("sick"), reg("well"), health=states)
    assert isinstance(out, Forward) and out.decision.picked_instance == "well"


def test_half_open_not_probing_is_unavailable() -> None:
    states = {"a": health("a", breaker=BreakerState.HALF_OPEN, admit=0.0)}
    out = run(req(), reg("a"), health=states)
    assert isinstance(out, Unavailable) and out.retry_after_ms > 0


def test_slow_sole_candidate_serves_with_its_timeout_factor() -> None:
    slow = {"slow": health("slow", weight=0.0, timeout_factor=2.0)}
    alone = run(req(), reg("slow"), health=slow)
    assert isinstance(alone, Forward) and alone.timeout_factor == 2.0
    shared = run(req(), reg("slow"), reg("fast"), health=slow)
    assert isinstance(shared, Forward) and shared.decision.picked_instance == "fast" and shared.timeout_factor == 1.0


def test_forward_carries_the_arm_and_the_admission_note() -> None:
    regs = (reg("old", build_version="1.0.0"), reg("new", build_version="2.0.0"))
    out = run(req(canary=True), *regs, canaries={"agent://echo/main": canary("2.0.0")})
    assert isinstance(out, Forward) and out.arm == "canary" and out.decision.picked_instance == "new"
    assert out.admission is not None and "old" in out.admission
    plain = run(req(), *regs)
    assert isinstance(plain, Forward) and plain.arm is None and plain.admission is None


def test_rolled_back_canary_alone_is_no_route() -> None:
    back = {"agent://echo/main": canary("2.0.0", state=CanaryState.ROLLED_BACK)}
    out = run(req(), reg("new", build_version="2.0.0"), canaries=back)
    assert isinstance(out, NoRoute)


def test_every_candidate_over_its_qps_limit_overloads_with_the_refill_time() -> None:
    out = run(req(), reg("a", qps_limit=2), reg("b", qps_limit=2), throttled={"a": 400, "b": 250})
    assert isinstance(out, Overload) and out.retry_after_ms == 250 and "qps_limit" in out.message


def test_a_request_stamped_with_a_contract_version_goes_only_to_that_versions_line() -> None:
    """Two majors live and a range that takes both: the intake stamped 2.1.0 (decision 0075), so a 1.x instance would
    reject it; it goes to the 2.x line, and with no 2.x instance left it finds no route, naming the narrowed range."""
    v1, v2 = reg("v1", version="1.4.0"), reg("v2", version="2.3.0")
    for _ in range(20):
        out = run(req(version_range="*", schema_version="2.1.0"), v1, v2)
        assert isinstance(out, Forward) and out.decision.picked_instance == "v2"
    both = {decide(req(version_range="*"), [v1, v2], weights=Weights(), now_ms=NOW,  # type: ignore[union-attr]
                   rng=random.Random(seed)).decision.picked_instance for seed in range(40)}
    assert both == {"v1", "v2"}, "unstamped: either line, as before"
    gone = run(req(version_range=">=1", schema_version="2.1.0"), v1)
    assert isinstance(gone, NoRoute) and ">=1 ^2.1.0" in gone.message


def test_within_line_narrows_each_alternative_and_leaves_an_unreadable_version_alone() -> None:
    assert within_line("*", "1.2.0") == "^1.2.0"
    assert within_line("^1 || ^2", "2.0.1") == "^1 ^2.0.1 || ^2 ^2.0.1"
    assert within_line("^1", None) == "^1" and within_line("^1", "") == "^1"
    assert within_line("^1", "not-a-version") == "^1"
    assert satisfies("2.4.0", within_line("*", "2.1.0")) and not satisfies("3.0.0", within_line("*", "2.1.0"))
