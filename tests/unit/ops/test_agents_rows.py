"""Agent listing rows (`reach agents`, the console) carry each instance's health; one without a record is healthy."""

from __future__ import annotations

from reach.core.views.registryview import InstanceInfo
from reach.ops.agents import row as _row
from reach.records import AgentRegistration, AgentState, BreakerState, InstanceHealth


def info() -> InstanceInfo:
    reg = AgentRegistration(agent_id="agent://demo/sick", instance_id="i-1", build_version="1", state=AgentState.READY,
                            heartbeat_at=1_000, ttl_ms=10_000, inbox_topic="ns.agent.demo.sick")
    return InstanceInfo(registration=reg, effective_state=AgentState.READY, heartbeat_age_ms=5, load=0.0)


def test_rows_with_and_without_health() -> None:
    opened = InstanceHealth(instance_id="i-1", agent_id="agent://demo/sick", at=900, breaker=BreakerState.OPEN,
                            open_until=4_000, admit=0.0, success_1m=0.0, p95_ms=3.0, slow_ratio=0.0)
    row = _row(info(), None, 1_000, opened)
    assert (row["breaker"], row["open_until"], row["success_1m"], row["p95_ms"], row["health_at"]) == (
        "OPEN", 4_000, 0.0, 3.0, 900)
    plain = _row(info(), None, 1_000)
    assert (plain["breaker"], plain["admit"], plain["success_1m"]) == ("CLOSED", 1.0, None)


def test_a_row_names_the_capabilities_the_instance_subscribes_to() -> None:
    from reach.cli.agents import _marked
    from reach.records import Capability, CapabilityMode

    base = info()
    reg = base.registration.model_copy(update={"capabilities": [
        Capability(name="demo.order.created", version="1.0.0", mode=CapabilityMode.SUBSCRIBE),
        Capability(name="demo.echo", version="1.0.0")]})
    row = _row(InstanceInfo(registration=reg, effective_state=AgentState.READY, heartbeat_age_ms=5, load=0.0),
               None, 1_000)
    assert row["subscribes"] == ["demo.order.created"]
    assert [_marked(c, row["subscribes"]) for c in row["capabilities"]] == [
        "demo.order.created@1.0.0 (subscribe)", "demo.echo@1.0.0"]


def test_a_row_names_the_capabilities_declared_idempotent() -> None:
    from reach.records import Capability

    base = info()
    reg = base.registration.model_copy(update={"capabilities": [
        Capability(name="doc.search", version="1.0.0", idempotent=True),
        Capability(name="demo.charge", version="1.0.0")]})
    row = _row(InstanceInfo(registration=reg, effective_state=AgentState.READY, heartbeat_age_ms=5, load=0.0),
               None, 1_000)
    assert row["idempotent"] == ["doc.search"]
