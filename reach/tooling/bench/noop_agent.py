"""The round trip's no-op agent: `agent://bench/noop` serves `bench.noop` 1.0.0 and returns an empty object.

Run by the bench as `reach agent run reach.tooling.bench.noop_agent:agent` (the real SDK: leases, receipts, commits).
"""

from __future__ import annotations

from typing import Any

from reach.agent import Agent

CAPABILITY = "bench.noop"
AGENT_ID = "agent://bench/noop"

agent = Agent(AGENT_ID, region="local", max_concurrency=256, ttl_ms=15_000)


@agent.capability(CAPABILITY, version="1.0.0")
async def noop(_payload: Any) -> dict[str, Any]:
    """Do nothing: the round trip measures Reach, not the handler."""
    return {}
