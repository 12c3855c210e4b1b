"""Simulated agent instances for the route mode: 15 READY instances of 3 agents, one capability each."""

from __future__ import annotations

from reach.envelopes import now_ms
from reach.kafka import codec
from reach.records import AgentRegistration, AgentState, Capability
from reach.tooling.bench.workspace import Workspace

CAPABILITIES = ("bench.alpha", "bench.beta", "bench.gamma")
INSTANCES_PER_AGENT = 5


def registrations(ws: Workspace, *, ttl_ms: int = 600_000) -> list[AgentRegistration]:
    """Agent `agent://bench/<cap>` x 5 instances; instance i owns inbox partitions i and i+5 (8 in all)."""
    partitions = ws.spec.family("agent").partitions
    regs = []
    for cap in CAPABILITIES:
        agent_id = f"agent://bench/{cap.split('.')[1]}"
        inbox = ws.names.inbox(agent_id)
        for i in range(INSTANCES_PER_AGENT):
            regs.append(AgentRegistration(
                agent_id=agent_id, instance_id=f"{cap}-{i}", build_version="bench",
                capabilities=[Capability(name=cap, version="1.0.0")], region="eu" if i % 2 else "us",
                max_concurrency=10**9, state=AgentState.READY, heartbeat_at=now_ms(), ttl_ms=ttl_ms,
                assigned_partitions=[p for p in (i, i + INSTANCES_PER_AGENT) if p < partitions], inbox_topic=inbox,
            ))
    return regs


def register(ws: Workspace, regs: list[AgentRegistration]) -> list[str]:
    """Create the inboxes and capability topics, publish one heartbeat per instance; returns the inboxes."""
    inboxes = sorted({r.inbox_topic for r in regs if r.inbox_topic})
    for inbox in inboxes:
        ws.ensure(inbox, "agent")
    for cap in CAPABILITIES:
        ws.ensure(ws.names.capability(cap))
    ws.burst((ws.names.registry, r.instance_id, codec.encode(r)) for r in regs)
    return inboxes
