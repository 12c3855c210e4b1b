"""The decide function: each outcome value and the bad-input checks."""

from __future__ import annotations

import random

from reach.candidates import RouteRequest
from reach.loads import UNMEASURED_RETRY_AFTER_MS, InstanceLoad
from reach.records import Weights
from reach.routing import Expired, Forward, NoRoute, Overload, Reject, decide, inbox_partition, parse_request
from tests.unit.routing_fixtures import reg

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


def test_overload_when_all_above_threshold() -> None:
    out = run(req(), reg("a", inflight=9), reg("b", inflight=10))
    assert isinstance(out, Overload) and len(out.scores) == 2
    assert out.retry_after_ms == UNMEASURED_RETRY_AFTER_MS, "no drain rate measured yet"
    assert "a running 9/10, queue 0/0, draining not measured yet" in out.message


def test_overload_retry_after_comes_from_the_soonest_drain() -> None:
    loads = {"a": InstanceLoad(4, 20, 4, 16, drain_rate=4.0), "b": InstanceLoad(4, 16, 4, 16, drain_rate=2.0)}
    out = run(req(), reg("a", max_concurrency=4, max_queue=16), reg("b", max_concurrency=4, max_queue=16),
              loads=loads)
    assert isinstance(out, Overload)
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
