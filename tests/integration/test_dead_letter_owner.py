"""Dead letters with owners on the real broker (issue 41 item 4): a request whose retries are spent is dead-lettered;
nobody redrives it within its POLICY's dead_after, so it becomes DEAD, `reach dlq ls --dead` lists it with its
agent's owner, and the owner is told once through the channel it names (a real webhook receiver behind the
webhook channel agent)."""

from __future__ import annotations

import json
import uuid
from typing import Any

import pytest
from pydantic import SecretStr

from reach.agent import Agent, TransientError
from reach.channels.agent import channel_agent
from reach.channels.settings import ChannelSettings, ClosureSettings
from reach.client import Client
from reach.settings import KafkaSettings, ReachSettings, RedisSettings
from tests.integration.agent_support import reach_cli, running, wait_for
from tests.integration.channel_servers import Receiver, listening
from tests.integration.stream_app import StreamApp

pytestmark = pytest.mark.integration


def failing(capability: str, owner: str) -> Agent:
    agent = Agent(f"agent://owned/{capability.split('.')[-1]}", owner=owner, max_concurrency=2)

    @agent.capability(capability, version="1.0.0", input_schema={"type": "object"})
    async def handle(payload: dict[str, Any]) -> dict[str, Any]:
        raise TransientError("the downstream is gone")

    return agent


def test_a_dead_letter_nobody_redrives_becomes_dead_and_its_owner_is_told(stream_app: StreamApp) -> None:
    capability = f"owned.c{uuid.uuid4().hex[:6]}"
    webhook = channel_agent("webhook", settings=ChannelSettings(webhook_secret=SecretStr("wh"), timeout_s=2,
                                                                webhook_allow_private=True), kafka=KafkaSettings(),
                            redis=RedisSettings(), reach=ReachSettings(), closure=ClosureSettings())
    with listening(Receiver()) as receiver:
        owner = f"webhook:{receiver.url}/hook"
        done = reach_cli("policy", "set", "--capability", capability, "--max-attempts", "1", "--dead-after", "3s")
        assert done.returncode == 0, done.stderr
        with running(webhook), running(failing(capability, owner)), Client() as client:
            wait_for(lambda: {"agent://channels/webhook", f"agent://owned/{capability.split('.')[-1]}"} <= {
                a["agent_id"] for a in stream_app.get("/agents") if a["state"] == "READY"}, 90,  # type: ignore[union-attr]
                "the agents READY")
            message_id = client.send(capability, {"n": 1})

            def listed(dead: bool) -> list[dict[str, Any]]:
                args = ["dlq", "ls", "--capability", capability, "--json"] + (["--dead"] if dead else [])
                found = reach_cli(*args)
                assert found.returncode == 0, found.stderr
                return [row for row in json.loads(found.stdout)["letters"] if row["message_id"] == message_id]

            wait_for(lambda: listed(False), 90, "the request dead-lettered", interval=0.5)
            wait_for(lambda: listed(True), 30, "the letter DEAD 3 s after its last failure", interval=0.5)
            [row] = listed(True)
            assert row["owner"] == owner and row["dead"] is True
            wait_for(lambda: receiver.posts(), 60, "the owner told through the webhook", interval=0.5)
            [hit] = receiver.posts()
            body = json.loads(hit.body)
            assert body["kind"] == "dead_letter" and body["message_id"] == message_id
            assert body["capability"] == capability and body["redrive"].startswith("reach dlq replay --id ")
