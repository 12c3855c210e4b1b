"""The writer agent: `agent://demo/writer` serves `demo.write` 1.0.0 and streams its answer.

It emits 5 chunks of text 200 ms apart (`ctx.emit`, with `ctx.progress` after each), then completes with the
whole text, the way a language-model agent streams tokens.
Run it from the repo root:  reach agent run examples.writer_agent:agent
Then:                       reach send demo.write --payload '{"topic": "Kafka"}' --wait --follow
"""

from __future__ import annotations

import asyncio
import os
from typing import Any

from reach.agent import Agent, Context

agent = Agent("agent://demo/writer", region=os.environ.get("REACH_AGENT_REGION", "local"), max_concurrency=8)
PAUSE_S = 0.2


def parts(topic: str) -> list[str]:
    """The five chunks the writer streams for `topic`."""
    return [f"{topic} ", "keeps ", "every ", "word ", "in order."]


@agent.capability(
    "demo.write",
    version="1.0.0",
    input_schema={"type": "object", "properties": {"topic": {"type": "string", "maxLength": 200}}},
    output_schema={"type": "object", "required": ["text"], "properties": {"text": {"type": "string"}}},
    tags=["demo", "streaming"],
    examples=[{"topic": "Kafka"}],
)
async def write(payload: dict[str, Any], ctx: Context) -> dict[str, Any]:
    """Stream five chunks 200 ms apart, then return the whole text."""
    chunks = parts(str(payload.get("topic", "Reach")))
    for done, chunk in enumerate(chunks, start=1):
        if done > 1:
            await asyncio.sleep(PAUSE_S)
        await ctx.emit(chunk)
        await ctx.progress(done / len(chunks), f"{done} of {len(chunks)}")
    return {"text": "".join(chunks)}
