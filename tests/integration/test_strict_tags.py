"""Strict tag routing (issue 41 item 2, Envelope v5 `routing.strict_tags`) on the real broker: a request whose tags
no instance carries is served by an untagged one unless the caller asks for strict tags; then it ends UNROUTABLE
with the reason, and a request whose tags an instance carries goes to that instance only, from the SDK and from
`reach send --tag --strict-tags`."""

from __future__ import annotations

import json
from typing import Any

import pytest
from typer.testing import CliRunner

from reach.agent import Agent, Context
from reach.cli import app as reach_app
from reach.client import Client
from reach.invoke import InvokeUnroutable
from reach.names import Names
from tests.integration.agent_support import all_running, owning_partitions, wait_for
from tests.integration.stream_app import StreamApp

pytestmark = pytest.mark.integration
CAP = "test.render"


def _agent(agent_id: str, tags: list[str]) -> Agent:
    agent = Agent(agent_id, ttl_ms=3000, drain_grace_s=5)

    @agent.capability(CAP, version="1.0.0", input_schema={"type": "object"}, tags=tags)
    def render(payload: dict[str, Any], ctx: Context) -> dict[str, Any]:
        return {"by": ctx.agent_id}

    return agent


def test_strict_tags_are_a_must_and_loose_ones_a_preference(namespace: str, stream_app: StreamApp) -> None:
    names = Names(namespace)
    agents = [_agent("agent://test/gpu", ["gpu"]), _agent("agent://test/cpu", [])]
    with all_running(agents), Client() as client:
        wait_for(lambda: owning_partitions(names, agents), 60, "both instances READY")
        loose = client.invoke(CAP, {}, tags=["tpu"], timeout_ms=30_000)
        with pytest.raises(InvokeUnroutable) as strict:
            client.invoke(CAP, {}, tags=["tpu"], strict_tags=True, timeout_ms=30_000)
        tagged = [client.invoke(CAP, {}, tags=["gpu"], strict_tags=True, timeout_ms=30_000)["by"] for _ in range(5)]
        shown = CliRunner().invoke(reach_app, ["send", CAP, "--payload", "{}", "--tag", "gpu", "--strict-tags",
                                               "--wait", "--json", "--timeout", "30"])
        refused = CliRunner().invoke(reach_app, ["send", CAP, "--payload", "{}", "--strict-tags"])
    assert loose["by"] in {"agent://test/gpu", "agent://test/cpu"}, "loose tags: served anyway"
    receipt = strict.value.receipt
    assert receipt is not None and receipt.error is not None and receipt.error.code == "NO_ROUTE"
    assert "with tags tpu (strict_tags)" in receipt.error.message
    assert set(tagged) == {"agent://test/gpu"}, "strict: only the instance carrying the tag"
    assert shown.exit_code == 0, shown.output
    assert json.loads(shown.stdout)["agent_id"] == "agent://test/gpu"
    assert refused.exit_code != 0 and "--tag" in str(refused.exception), "strict tags without a tag: refused"
