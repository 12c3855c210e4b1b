"""The candidate filter: hard filters, soft preferences and backpressure."""

from __future__ import annotations

from reach.core.candidates import RouteRequest, select
from reach.core.loads import InstanceLoad
from reach.records import AgentState, BreakerState
from tests.unit.routing_fixtures import health, reg


def ids(selection_candidates: tuple) -> set[str]:  # type: ignore[type-arg]
    return {c.instance_id for c in selection_candidates}


def req(**kw: object) -> RouteRequest:
    base: dict[str, object] = {"message_id": "m1", "capability": "text.echo"}
    base.update(kw)
    return RouteRequest(**base)  # type: ignore[arg-type]


def test_capability_and_version_range() -> None:
    regs = [reg("a", version="1.2.0"), reg("b", version="2.0.0"), reg("c", capability="other.cap")]
    assert ids(select(req(version_range="^1.2"), regs).candidates) == {"a"}
    assert ids(select(req(version_range="^2"), regs).candidates) == {"b"}
    assert ids(select(req(version_range="*"), regs).candidates) == {"a", "b"}
    assert ids(select(req(version_range="^1.3"), regs).candidates) == set()


def test_only_ready_not_disabled_with_partitions() -> None:
    regs = [
        reg("ready"),
        reg("draining", state=AgentState.DRAINING),
        reg("offline", state=AgentState.OFFLINE),
        reg("starting", state=AgentState.STARTING),
        reg("nopart", partitions=[]),
        reg("disabled"),
    ]
    assert ids(select(req(), regs, disabled={"disabled"}).candidates) == {"ready"}


def test_tenant_and_to_agent() -> None:
    regs = [reg("a", tenants=["acme"]), reg("b", agent_id="agent://other/x"), reg("c")]
    assert ids(select(req(tenant="acme"), regs).candidates) == {"a", "b", "c"}
    assert ids(select(req(tenant="globex"), regs).candidates) == {"b", "c"}
    assert ids(select(req(to_agent="agent://other/x"), regs).candidates) == {"b"}


def test_excluded_only_while_another_exists() -> None:
    regs = [reg("a"), reg("b")]
    assert ids(select(req(excluded_instances=frozenset({"a"})), regs).candidates) == {"b"}
    assert ids(select(req(excluded_instances=frozenset({"a", "b"})), regs).candidates) == {"a", "b"}


def test_tags_prefer_full_matches() -> None:
    regs = [reg("gpu", tags=["gpu", "fast"]), reg("plain")]
    assert ids(select(req(tags=("gpu",)), regs).candidates) == {"gpu"}
    assert ids(select(req(tags=("tpu",)), regs).candidates) == {"gpu", "plain"}


def test_strict_tags_never_fall_back_to_instances_without_them() -> None:
    regs = [reg("gpu", tags=["gpu", "fast"]), reg("plain")]
    assert ids(select(req(tags=("gpu",), strict_tags=True), regs).candidates) == {"gpu"}
    assert ids(select(req(tags=("tpu",), strict_tags=True), regs).candidates) == set()
    assert ids(select(req(strict_tags=True), regs).candidates) == {"gpu", "plain"}, "no tags asked: no filter"


def test_backpressure_sheds_then_overloads() -> None:
    regs = [reg("hot", inflight=9, max_concurrency=10), reg("cool", inflight=2, max_concurrency=10)]
    assert ids(select(req(), regs).candidates) == {"cool"}
    busy = {"cool": InstanceLoad(9, 0, 10, 0)}
    assert ids(select(req(), regs, loads=busy).candidates) == set()
    both = select(req(), regs, loads=busy)
    assert both.all_overloaded and ids(both.overloaded) == {"hot", "cool"}
    # exactly 80% is not above the threshold
    assert ids(select(req(), [reg("edge", inflight=8, max_concurrency=10)]).candidates) == {"edge"}


def test_a_busy_instance_queues_until_its_bound() -> None:
    regs = [reg("a", max_concurrency=8, max_queue=32), reg("b", max_concurrency=8, max_queue=32)]
    queuing = {"a": InstanceLoad(8, 31, 8, 32), "b": InstanceLoad(8, 5, 8, 32)}
    assert ids(select(req(), regs, loads=queuing).candidates) == {"a", "b"}, "busy but with room in the queue"
    a_full = {**queuing, "a": InstanceLoad(8, 32, 8, 32)}
    assert ids(select(req(), regs, loads=a_full).candidates) == {"b"}, "a full queue sheds to the other"
    idle_long_queue = {"a": InstanceLoad(2, 40, 8, 32), "b": InstanceLoad(8, 40, 8, 32)}
    assert ids(select(req(), regs, loads=idle_long_queue).candidates) == {"a"}, "not busy: not shed"
    both_full = {"a": InstanceLoad(7, 32, 8, 32), "b": InstanceLoad(8, 33, 8, 32)}
    assert select(req(), regs, loads=both_full).all_overloaded


def test_without_a_load_view_the_heartbeat_is_the_load() -> None:
    regs = [reg("a", inflight=3, max_concurrency=4, max_queue=2)]
    (only,) = select(req(), regs).candidates
    assert only.load == InstanceLoad(3, 0, 4, 2)


# -- health: breakers, weight 0, qps ------------------------------------------------------------------

NOW = 1_000_000


def test_an_open_breaker_is_not_a_candidate_until_open_until() -> None:
    regs = [reg("sick"), reg("well")]
    opened = {"sick": health("sick", breaker=BreakerState.OPEN, open_until=NOW + 5_000)}
    assert ids(select(req(), regs, health=opened, now_ms=NOW).candidates) == {"well"}
    assert ids(select(req(), regs, health=opened, now_ms=NOW + 5_000).candidates) == {"sick", "well"}


def test_an_open_instance_never_comes_back_through_the_soft_filters() -> None:
    regs = [reg("sick"), reg("well")]
    opened = {"sick": health("sick", breaker=BreakerState.OPEN, open_until=NOW + 5_000)}
    retry = req(excluded_instances=frozenset({"well"}))
    assert ids(select(retry, regs, health=opened, now_ms=NOW).candidates) == {"well"}


def test_every_match_open_reports_the_first_open_until() -> None:
    regs = [reg("a"), reg("b")]
    opened = {"a": health("a", breaker=BreakerState.OPEN, open_until=NOW + 7_000),
              "b": health("b", breaker=BreakerState.OPEN, open_until=NOW + 3_000)}
    selection = select(req(), regs, health=opened, now_ms=NOW)
    assert selection.all_open and selection.unavailable_ms == 3_000 and not selection.candidates


def test_unknown_and_half_open_breakers_are_candidates() -> None:
    regs = [reg("a"), reg("b")]
    states = {"a": health("a", breaker=BreakerState.UNKNOWN), "b": health("b", breaker=BreakerState.HALF_OPEN)}
    assert ids(select(req(), regs, health=states, now_ms=NOW).candidates) == {"a", "b"}


def test_weight_zero_only_when_nothing_else() -> None:
    regs = [reg("slow"), reg("fast")]
    slow = {"slow": health("slow", weight=0.0, timeout_factor=2.0)}
    assert ids(select(req(), regs, health=slow, now_ms=NOW).candidates) == {"fast"}
    assert ids(select(req(), [reg("slow")], health=slow, now_ms=NOW).candidates) == {"slow"}
    busy = {"fast": InstanceLoad(10, 0, 10, 0)}
    assert ids(select(req(), regs, health=slow, loads=busy, now_ms=NOW).candidates) == {"slow"}, \
        "a slow instance with room serves rather than the request failing OVERLOAD on a busy healthy one"


def test_an_instance_over_its_qps_limit_is_skipped_like_an_overloaded_one() -> None:
    regs = [reg("limited", qps_limit=5), reg("free")]
    assert ids(select(req(), regs, throttled={"limited": 120}).candidates) == {"free"}
    alone = select(req(), [reg("limited", qps_limit=5)], throttled={"limited": 120})
    assert alone.all_overloaded and alone.throttled == {"limited": 120}
