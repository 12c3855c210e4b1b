"""The slow agent: `agent://demo/slow` serves `demo.slow` 1.0.0 and takes its time, like an LLM-backed handler.

It declares an execution timeout of 30 s (in its registration); each request sleeps REACH_SLOW_MS ms (default
12,000, about one LLM call at P95 18 s's median side) or the payload's `ms`, then returns how long it slept.
`{"heartbeat": true}` sleeps in one-second steps and calls `ctx.heartbeat()` after each: the run may then last
past 30 s, as long as it keeps beating (up to the POLICY cap or the message's deadline), see docs/agents.md.

It declares `demo.slow` idempotent (sleeping twice harms nothing): a run cut by its timeout is retried, and two
requests with the same payload and no idempotency_key within the window run once (docs/agents.md).

Run it from the repo root:  reach agent run examples.slow_agent:agent
Then:                       reach send demo.slow --payload '{}' --wait                  # completes after 12 s
                            reach send demo.slow --payload '{}' --execution-timeout 5s --wait   # times out, retries
"""

from __future__ import annotations

import asyncio
import os
import time
from typing import Any

from reach.agent import Agent, Context

agent = Agent("agent://demo/slow", region=os.environ.get("REACH_AGENT_REGION", "local"), max_concurrency=8,
              execution_timeout_ms=30_000)


@agent.capability(
    "demo.slow",
    version="1.0.0",
    input_schema={"type": "object", "properties": {"ms": {"type": "integer", "minimum": 0},
                                                   "heartbeat": {"type": "boolean"}}},
    output_schema={"type": "object"},
    tags=["demo"],
    examples=[{}, {"ms": 2000}, {"ms": 40000, "heartbeat": True}],
    idempotent=True,
)
async def slow(payload: dict[str, Any], ctx: Context) -> dict[str, Any]:
    """Sleep the payload's `ms` (else REACH_SLOW_MS, default 12 s), heartbeating every second when asked."""
    ms = int(payload.get("ms", os.environ.get("REACH_SLOW_MS", "12000")))
    started = time.monotonic()
    if payload.get("heartbeat"):
        while (left := ms / 1000 - (time.monotonic() - started)) > 0:
            await asyncio.sleep(min(1.0, left))
            ctx.heartbeat()
    else:
        await asyncio.sleep(ms / 1000)
    return {"slept_ms": round((time.monotonic() - started) * 1000), "attempt": ctx.attempt}
