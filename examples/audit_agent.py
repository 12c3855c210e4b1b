"""The audit agent: `agent://demo/audit` subscribes to `demo.order.created` 1.0.0 and records every order event.

A capability served in `subscribe` mode fans out: every subscribing agent gets every event, each as its own delivery
(docs/agents.md#subscribe-fan-out); the instances of one agent share its deliveries (one consumer group). Each event
it audits goes to the Redis set `<ns>:audit:events`, each run to the hash `<ns>:audit:runs` (per instance).

Run it from the repo root (one or more instances):  reach agent run examples.audit_agent:agent
Then:  reach send demo.order.created --payload '{"order_id": "o-1", "amount": 42}'
"""

from __future__ import annotations

import os
from typing import Any

from examples.order_events import CAPABILITY, EXAMPLE, ORDER_SCHEMA, SUBSCRIBER, remember
from reach.agent import Agent
from reach.agent.agent import Context
from reach.records import CapabilityMode

agent = Agent("agent://demo/audit", region=os.environ.get("REACH_AGENT_REGION", "local"), **SUBSCRIBER)


@agent.capability(CAPABILITY, version="1.0.0", mode=CapabilityMode.SUBSCRIBE, input_schema=ORDER_SCHEMA,
                  output_schema={"type": "object"}, tags=["demo"], examples=[EXAMPLE])
async def audit(payload: dict[str, Any], ctx: Context) -> dict[str, Any]:
    """Record the order event (once per event, whichever instance runs it)."""
    return {"audited": payload.get("order_id"), "event": await remember("audit", ctx, agent.instance_id)}
