"""The flaky agent: `agent://demo/flaky` serves `demo.flaky` 1.0.0 and fails on purpose, to show retries.

- `{"fail_times": N}`: the first N attempts of a message fail transiently (ATTEMPT_FAILED -> retry),
  then the payload comes back as the result.
- `{"business_error": true}`: a business error with code BAD_REQUEST (FAILED, never retried).
Attempt counts live in Redis (`<ns>:flaky:attempts:<message_id>`), so every instance sees them, and
`<ns>:flaky:runs:<message_id>` counts completed runs (the side effect the retry tests check).

Its region is REACH_AGENT_REGION (default "local"); `reach demo` runs one instance per region.
Run it from the repo root:  reach agent run examples.flaky_agent:agent
"""

from __future__ import annotations

import os
from typing import Any

from reach.agent import Agent, BusinessError, TransientError
from reach.agent.agent import Context
from reach.redisclient import AsyncRedis, async_client
from reach.settings import ReachSettings, RedisSettings

agent = Agent("agent://demo/flaky", region=os.environ.get("REACH_AGENT_REGION", "local"), max_concurrency=8)
_redis: list[AsyncRedis] = []


@agent.on_start
async def connect() -> None:
    _redis.append(async_client(RedisSettings().url()))  # one node or a cluster


@agent.capability(
    "demo.flaky",
    version="1.0.0",
    input_schema={"type": "object", "properties": {"fail_times": {"type": "integer", "minimum": 0},
                                                   "business_error": {"type": "boolean"}}},
    output_schema={"type": "object"},
    tags=["demo"],
    examples=[{"fail_times": 2}, {"business_error": True}],
)
async def flaky(payload: dict[str, Any], ctx: Context) -> dict[str, Any]:
    """Fail transiently `fail_times` times per message, then echo; BAD_REQUEST on business_error."""
    if payload.get("business_error"):
        raise BusinessError("BAD_REQUEST", "the payload asked for a business error")
    redis = _redis[0]
    prefix = f"{ReachSettings().namespace}:flaky"
    seen = await redis.incr(f"{prefix}:attempts:{ctx.envelope.message_id}")
    await redis.expire(f"{prefix}:attempts:{ctx.envelope.message_id}", 86_400)
    if seen <= int(payload.get("fail_times", 0)):
        raise TransientError(f"planned failure {seen} of {payload.get('fail_times')}")
    await redis.incr(f"{prefix}:runs:{ctx.envelope.message_id}")
    return payload
