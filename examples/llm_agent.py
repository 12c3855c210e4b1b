"""An LLM-shaped agent: `agent://demo/llm` serves `demo.llm` 1.0.0 and reports what each call cost.

No model is called: every call "reads" 100 tokens and "writes" 50 with the model `demo-small` at 0.002 units of
REACH_CURRENCY (2,000 micro-units), reported with `ctx.usage` as a handler wrapping a real model would
(docs/agents.md, Usage). Run it from the repo root:  reach agent run examples.llm_agent:agent
Then:  reach send demo.llm --payload '{"prompt": "hello"}' --wait
       reach receipts sql -f docs/queries/usage_by_capability.sql
"""

from __future__ import annotations

import os
from typing import Any

from reach.agent import Agent, Context

INPUT_TOKENS, OUTPUT_TOKENS, COST_MICROS, MODEL = 100, 50, 2_000, "demo-small"

agent = Agent("agent://demo/llm", region=os.environ.get("REACH_AGENT_REGION", "local"), max_concurrency=8)


@agent.capability(
    "demo.llm",
    version="1.0.0",
    input_schema={"type": "object", "properties": {"prompt": {"type": "string"}}},
    output_schema={"type": "object"},
    tags=["demo"],
    examples=[{"prompt": "hello"}],
)
async def complete(payload: dict[str, Any], ctx: Context) -> dict[str, Any]:
    """Answer with the prompt turned around, and report the call's usage."""
    ctx.usage(input_tokens=INPUT_TOKENS, output_tokens=OUTPUT_TOKENS, model=MODEL, cost=COST_MICROS)
    return {"text": str(payload.get("prompt", ""))[::-1], "model": MODEL}
