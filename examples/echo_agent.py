"""The echo agent: `agent://demo/echo` serves `demo.echo` 1.0.0 and returns its payload unchanged.

Its region is REACH_AGENT_REGION (default "local"); `reach demo` runs one instance per region.
Run it from the repo root:  reach agent run examples.echo_agent:agent
Then:                       reach send demo.echo --payload '{"text": "hello"}'
"""

from __future__ import annotations

import os
from typing import Any

from reach.agent import Agent

agent = Agent("agent://demo/echo", region=os.environ.get("REACH_AGENT_REGION", "local"), max_concurrency=8)


@agent.capability(
    "demo.echo",
    version="1.0.0",
    input_schema={"type": "object"},
    output_schema={"type": "object"},
    tags=["demo"],
    examples=[{"text": "hello"}],
)
async def echo(payload: dict[str, Any]) -> dict[str, Any]:
    """Return the request as the result."""
    return payload
