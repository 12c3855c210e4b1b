"""Builders shared by the routing unit tests."""

from __future__ import annotations

from reach.records import AgentRegistration, AgentState, BreakerState, Canary, CanaryState, Capability, InstanceHealth


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
    build_version: str = "test",
    qps_limit: float | None = None,
) -> AgentRegistration:
    return AgentRegistration(
        agent_id=agent_id,
        instance_id=instance_id,
        build_version=build_version,
        qps_limit=qps_limit,
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


def health(
    instance_id: str,
    *,
    breaker: BreakerState = BreakerState.CLOSED,
    open_until: int | None = None,
    admit: float = 1.0,
    weight: float = 1.0,
    timeout_factor: float = 1.0,
) -> InstanceHealth:
    return InstanceHealth(instance_id=instance_id, agent_id="agent://echo/main", at=0, breaker=breaker,
                          open_until=open_until, admit=admit, weight=weight, timeout_factor=timeout_factor)


def canary(
    version: str = "2.0.0",
    *,
    agent_id: str = "agent://echo/main",
    steps: list[int] | None = None,
    step: int = 0,
    state: CanaryState = CanaryState.RUNNING,
    step_ms: int = 60_000,
    min_success: float = 0.95,
    started_at: int = 0,
) -> Canary:
    return Canary(agent_id=agent_id, version=version, steps=steps or [5, 20, 50, 100], step=step, step_ms=step_ms,
                  min_success=min_success, state=state, started_at=started_at, step_started_at=started_at)
