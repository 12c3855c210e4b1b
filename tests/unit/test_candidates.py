"""The candidate filter: hard filters, soft preferences and backpressure."""

from __future__ import annotations

from reach.candidates import RouteRequest, select
from reach.loads import InstanceLoad
from reach.records import AgentState
from tests.unit.routing_fixtures import reg


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
