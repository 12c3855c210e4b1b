"""The soak's two builds of the fault suite's ledger agent: `stable` (every instance but one) and `canary` (the
instance the mid-run canary sends a share to). Both keep results REACH_SOAK_RESULT_TTL seconds (the run's
`--ttl`), so the agent's Redis keys reach their steady state within the run.

Run by `reach soak`: `reach agent run reach.tooling.soak.agents:stable` (or `:canary`)."""

from __future__ import annotations

import os

from reach.agent import Agent
from reach.core.retention import RESULT_TTL_S
from reach.tooling.faults import ledger_agent

TTL_ENV = "REACH_SOAK_RESULT_TTL"
STABLE, CANARY = "stable", "canary"


def _build(version: str) -> Agent:
    # the ledger agent's knobs (short session and lease, room for a backlog), with a build version and a TTL
    base = ledger_agent.agent
    agent = Agent(base.agent_id, build_version=version, max_concurrency=base.max_concurrency,
                  lease_margin_ms=1000, drain_grace_s=5, result_ttl_s=int(os.environ.get(TTL_ENV, RESULT_TTL_S)),
                  consumer_config={"session.timeout.ms": 6000, "heartbeat.interval.ms": 1500})
    agent.capability(ledger_agent.CAPABILITY, version="1.0.0", input_schema={"type": "object"},
                     output_schema={"type": "object"})(ledger_agent.echo)
    return agent


stable = _build(STABLE)
canary = _build(CANARY)
