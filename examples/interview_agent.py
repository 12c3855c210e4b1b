"""The interview agent: `agent://demo/interview` serves `demo.interview` 1.0.0 and asks before it answers.

Its first turn asks for the caller's name (`NeedsInput`): the message waits in INPUT_REQUIRED. The answer
(`reach answer ID --payload '{"name": "Ada"}'`, `POST /v1/messages/{id}:input`, or A2A `message/send` with the
task id) runs its next turn, which finds the answer in `ctx.turns` and completes with a greeting.
Run it from the repo root:  reach agent run examples.interview_agent:agent
Then:                       reach send demo.interview --payload '{}'      # prints the message id
                            reach status ID                               # INPUT_REQUIRED, the question
                            reach answer ID --payload '{"name": "Ada"}' --wait
"""

from __future__ import annotations

import os
from typing import Any

from reach.agent import Agent, Context, NeedsInput

agent = Agent("agent://demo/interview", region=os.environ.get("REACH_AGENT_REGION", "local"), max_concurrency=8)

QUESTION = "What is your name?"
NAME_SCHEMA = {"type": "object", "required": ["name"], "additionalProperties": False,
               "properties": {"name": {"type": "string", "minLength": 1, "maxLength": 100}}}


@agent.capability(
    "demo.interview",
    version="1.0.0",
    input_schema={"type": "object", "properties": {"greeting": {"type": "string", "maxLength": 50}}},
    output_schema={"type": "object", "required": ["greeting"], "properties": {"greeting": {"type": "string"}}},
    tags=["demo", "multi-turn"],
    examples=[{}, {"greeting": "Welcome"}],
)
async def interview(payload: dict[str, Any], ctx: Context) -> dict[str, Any] | NeedsInput:
    """Ask for the caller's name; on the next turn, greet them by it."""
    if not ctx.turns:
        return NeedsInput(QUESTION, NAME_SCHEMA)
    name = ctx.turns[-1].answer["name"]
    return {"greeting": f"{payload.get('greeting', 'Hello')}, {name}!", "turns": len(ctx.turns)}
