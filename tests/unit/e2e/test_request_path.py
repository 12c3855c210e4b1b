"""The request path on the in-memory bus: a request to its reply, a retry through a delay tier, a reroute after
a delivery timeout; the real workers in one process (memory_stack). These complement the integration tests."""

from __future__ import annotations

from typing import Any

from reach.agent import Agent
from reach.client import Client
from reach.records import Status
from tests.unit.e2e.memory_stack import MemoryStack, wait_for


def _echo(agent_id: str = "agent://e2e/echo") -> Agent:
    agent = Agent(agent_id, max_concurrency=2, consumer_config={"session.timeout.ms": 6_000})

    @agent.capability("e2e.echo", version="1.0.0", input_schema={"type": "object"}, output_schema={"type": "object"})
    async def echo(payload: dict[str, Any]) -> dict[str, Any]:
        return {"echo": payload}

    return agent


def test_a_request_is_routed_handled_and_answered(stack: MemoryStack) -> None:
    stack.run_agent(_echo())
    with Client() as client:
        result = client.invoke("e2e.echo", {"n": 1}, timeout_ms=5_000)
    assert result == {"echo": {"n": 1}}
