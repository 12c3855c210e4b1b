"""Agents for tests/integration/test_traces.py, run as `reach agent run tests.integration.traced_agents:ATTR`
processes (each exports its own spans): `planner` asks `lookup` for a child result before it answers."""

from __future__ import annotations

import asyncio
from typing import Any

from reach.agent import Agent
from reach.client import Client

planner = Agent("agent://demo/trace-planner", max_concurrency=4)
lookup = Agent("agent://demo/trace-lookup", max_concurrency=4)


@planner.capability("demo.plan", version="1.0.0", input_schema={"type": "object"})
async def plan(payload: dict[str, Any]) -> dict[str, Any]:
    with Client() as client:  # sent from the handler: a child of this run (its trace, its budget)
        child = await asyncio.to_thread(client.send, "demo.lookup", {"city": payload.get("city", "Oslo")})
    return {"planned": True, "child": child}


@lookup.capability("demo.lookup", version="1.0.0", input_schema={"type": "object"})
async def find(payload: dict[str, Any]) -> dict[str, Any]:
    return {"found": payload["city"]}
