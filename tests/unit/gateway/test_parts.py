"""The gateway's smaller parts: live versions from the registry, idempotency keys, invoke answers."""

from __future__ import annotations

from reach.core.views.registryview import RegistryView
from reach.gateway.answers import from_row, http_status
from reach.gateway.catalog import live_versions
from reach.gateway.idempotency import idem_key
from reach.records import AgentRegistration, AgentState, Capability, CapabilityMode, Status


def registration(instance: str, *caps: Capability, tenants: list[str] | None = None,
                 state: AgentState = AgentState.READY, heartbeat_at: int = 1_000) -> AgentRegistration:
    return AgentRegistration(agent_id="agent://demo/echo", instance_id=instance, build_version="t",
                             capabilities=list(caps), max_concurrency=1, state=state, heartbeat_at=heartbeat_at,
                             ttl_ms=10_000, inflight=0, assigned_partitions=[0], inbox_topic="reach.inbox.x",
                             tenants=tenants or [])


def test_live_versions_dedupe_and_filter_by_state_mode_and_tenant() -> None:
    view = RegistryView()
    v1, v2 = Capability(name="demo.echo", version="1.0.0"), Capability(name="demo.echo", version="1.1.0")
    listen = Capability(name="demo.echo", version="3.0.0", mode=CapabilityMode.SUBSCRIBE)
    view.apply("a", registration("a", v1, listen))
    view.apply("b", registration("b", v1, v2))
    view.apply("c", registration("c", Capability(name="demo.echo", version="2.0.0"), tenants=["other"]))
    view.apply("d", registration("d", Capability(name="demo.echo", version="4.0.0"), state=AgentState.DRAINING))
    view.apply("e", registration("e", Capability(name="demo.echo", version="5.0.0"), heartbeat_at=-100_000))
    assert sorted(c.version for c in live_versions(view, "demo.echo", "acme", 2_000)) == ["1.0.0", "1.1.0"]
    assert "2.0.0" in {c.version for c in live_versions(view, "demo.echo", "other", 2_000)}
    assert live_versions(view, "nothing", "acme", 2_000) == []


def test_idempotency_keys_are_scoped_by_namespace_and_app_and_hashed() -> None:
    key = idem_key("ns", "app1", "order/../7" * 50)
    assert key.startswith("ns:gateway:idem:app1:") and len(key) < 100
    assert idem_key("ns", "app2", "k") != idem_key("ns", "app1", "k")


def test_invoke_statuses_map_to_http() -> None:
    assert http_status(Status.COMPLETED, None) == 200
    assert http_status(Status.DEAD_LETTERED, "NO_ROUTE") == 404
    assert http_status(Status.EXPIRED, None) == 504
    assert http_status(Status.FAILED, "BUSINESS") == 502
    code, answer = from_row({"message_id": "m", "trace_id": "t", "status": "COMPLETED", "result": '{"a":1}',
                             "last_error": {"kind": "TRANSIENT", "code": "x", "message": "first try"}})
    assert (code, answer.result, answer.receipt_error, answer.error) == (200, {"a": 1}, None, None)
