"""The notify agent: `agent://demo/notify` subscribes to `demo.order.created` 1.0.0 and tells the customer.

It is the second subscriber beside examples/audit_agent.py: each order event reaches both, each as its own delivery
with its own receipts, retries and dead letters, so a slow or stopped notify never holds the audit. The message to
the customer is a stand-in: the event goes to the Redis set `<ns>:notify:events`, each run to `<ns>:notify:runs`.

Run it from the repo root:  reach agent run examples.notify_agent:agent
"""

from __future__ import annotations

import os
from typing import Any

from examples.order_events import CAPABILITY, EXAMPLE, ORDER_SCHEMA, SUBSCRIBER, remember
from reach.agent import Agent
from reach.agent.agent import Context
from reach.records import CapabilityMode

agent = Agent("agent://demo/notify", region=os.environ.get("REACH_AGENT_REGION", "local"), **SUBSCRIBER)


@agent.capability(CAPABILITY, version="1.0.0", mode=CapabilityMode.SUBSCRIBE, input_schema=ORDER_SCHEMA,
                  output_schema={"type": "object"}, tags=["demo"], examples=[EXAMPLE])
async def notify(payload: dict[str, Any], ctx: Context) -> dict[str, Any]:
    """Tell the customer about the order (a stand-in that records the event)."""
    return {"notified": payload.get("order_id"), "event": await remember("notify", ctx, agent.instance_id)}
