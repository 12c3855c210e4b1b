"""The billing agent: `agent://demo/billing` serves `demo.charge` 1.0.0: a side effect worth running once.

- `{"order": "o-1", "amount": 12.5}`: charges the order and reports a cost (`ctx.cost`, 1% of the amount), which
  lands in the COMPLETED receipt and in docs/queries/cost.sql. Send it with an `idempotency_key` (the order) and
  a second charge of the same order returns the first's result instead of charging again.
- Every run increments `<ns>:billing:runs:<order>` in Redis: the count of real charges, which the tests read.
- `REACH_BILLING_DELAY_MS` (default 0) makes each charge take that long, to watch a drain finish in-flight work.

Run it from the repo root:  reach agent run examples.billing_agent:agent
Then:                       reach send demo.charge --payload '{"order": "o-1", "amount": 12.5}'
"""

from __future__ import annotations

import asyncio
import os
from typing import Any

from reach.agent import Agent
from reach.agent.agent import Context
from reach.redisclient import AsyncRedis, async_client
from reach.settings import ReachSettings, RedisSettings

agent = Agent("agent://demo/billing", region=os.environ.get("REACH_AGENT_REGION", "local"), max_concurrency=8,
              drain_grace_s=30)
_redis: list[AsyncRedis] = []


@agent.on_start
async def connect() -> None:
    _redis.append(async_client(RedisSettings().url()))  # one node or a cluster


@agent.on_stop
async def disconnect() -> None:
    while _redis:
        await _redis.pop().aclose()


def runs_key(order: str) -> str:
    """Where the count of real charges of an order is kept."""
    return f"{ReachSettings().namespace}:billing:runs:{order}"


@agent.capability(
    "demo.charge",
    version="1.0.0",
    input_schema={"type": "object", "required": ["order", "amount"],
                  "properties": {"order": {"type": "string", "maxLength": 200},
                                 "amount": {"type": "number", "minimum": 0}}},
    output_schema={"type": "object"},
    tags=["demo"],
    examples=[{"order": "o-1", "amount": 12.5}],
)
async def charge(payload: dict[str, Any], ctx: Context) -> dict[str, Any]:
    """Charge the order once: count the run, wait the configured delay, report 1% of the amount as cost."""
    delay_ms = int(os.environ.get("REACH_BILLING_DELAY_MS", "0"))
    if delay_ms:
        await asyncio.sleep(delay_ms / 1000)
    runs = await _redis[0].incr(runs_key(payload["order"]))
    ctx.cost = round(payload["amount"] * 0.01, 6)
    return {"order": payload["order"], "charged": payload["amount"], "charge_number": runs,
            "instance": ctx.instance_id}
