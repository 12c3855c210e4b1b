"""A third subscriber of `demo.order.created` started in the middle of a run: it gets the events routed after it is
READY, none before (tests/integration/test_fanout.py)."""

from __future__ import annotations

from typing import Any

from examples.order_events import CAPABILITY, ORDER_SCHEMA, SUBSCRIBER, remember
from reach.agent import Agent
from reach.agent.agent import Context
from reach.records import CapabilityMode

agent = Agent("agent://demo/late", **SUBSCRIBER)


@agent.capability(CAPABILITY, version="1.0.0", mode=CapabilityMode.SUBSCRIBE, input_schema=ORDER_SCHEMA)
async def late(payload: dict[str, Any], ctx: Context) -> dict[str, Any]:
    return {"event": await remember("late", ctx, agent.instance_id)}
