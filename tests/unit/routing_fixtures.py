"""Builders shared by the routing unit tests."""

from __future__ import annotations

from reach.records import AgentRegistration, AgentState, Capability


def reg(
    instance_id: str,
    *,
    agent_id: str = "agent://echo/main",
    capability: str = "text.echo",
    version: str = "1.2.0",
    tags: list[str] | None = None,
    region: str | None = None,
    tenants: list[str] | None = None,
    state: AgentState = AgentState.READY,
    inflight: int = 0,
    max_concurrency: int = 10,
    max_queue: int = 0,
    partitions: list[int] | None = None,
) -> AgentRegistration:
    return AgentRegistration(
        agent_id=agent_id,
        instance_id=instance_id,
        build_version="test",
        capabilities=[Capability(name=capability, version=version, tags=tags or [])],
        tenants=tenants or [],
        region=region,
        max_concurrency=max_concurrency,
        max_queue=max_queue,
        state=state,
        heartbeat_at=0,
        ttl_ms=10_000,
        inflight=inflight,
        assigned_partitions=[0] if partitions is None else partitions,
        inbox_topic="ns.agent." + agent_id.removeprefix("agent://").replace("/", "."),
    )
