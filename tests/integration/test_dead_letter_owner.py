"""Dead letters with owners on the real broker (issue 41 item 4): a request whose retries are spent is dead-lettered;
nobody redrives it within its POLICY's dead_after, so it becomes DEAD, `reach dlq ls --dead` lists it with its
agent's owner, and the owner is told once through the channel it names (a real webhook receiver behind the
webhook channel agent). A NO_ROUTE letter has no agent: the owner of the gateway app that sent it is told."""

from __future__ import annotations

import json
import uuid
from typing import Any

import pytest
from cryptography.fernet import Fernet
from pydantic import SecretStr

from reach.agent import Agent, TransientError
from reach.channels.agent import channel_agent
from reach.channels.settings import ChannelSettings, ClosureSettings
from reach.client import Client
from reach.envelopes import now_ms
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


def webhook_agent() -> Agent:
    return channel_agent("webhook", settings=ChannelSettings(webhook_secret=SecretStr("wh"), timeout_s=2,
                                                             webhook_allow_private=True), kafka=KafkaSettings(),
                         redis=RedisSettings(), reach=ReachSettings(), closure=ClosureSettings())


def letters(capability: str, message_id: str, dead: bool) -> list[dict[str, Any]]:
    args = ["dlq", "ls", "--capability", capability, "--json"] + (["--dead"] if dead else [])
    found = reach_cli(*args)
    assert found.returncode == 0, found.stderr
    return [row for row in json.loads(found.stdout)["letters"] if row["message_id"] == message_id]


def test_a_dead_letter_nobody_redrives_becomes_dead_and_its_owner_is_told(stream_app: StreamApp) -> None:
    capability = f"owned.c{uuid.uuid4().hex[:6]}"
    webhook = webhook_agent()
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
                return letters(capability, message_id, dead)

            wait_for(lambda: listed(False), 90, "the request dead-lettered", interval=0.5)
            wait_for(lambda: listed(True), 30, "the letter DEAD 3 s after its last failure", interval=0.5)
            [row] = listed(True)
            assert row["owner"] == owner and row["dead"] is True
            wait_for(lambda: receiver.posts(), 60, "the owner told through the webhook", interval=0.5)
            [hit] = receiver.posts()
            body = json.loads(hit.body)
            assert body["kind"] == "dead_letter" and body["message_id"] == message_id
            assert body["capability"] == capability and body["redrive"].startswith("reach dlq replay --id ")


def test_a_no_route_letter_goes_to_the_owner_of_the_app_that_sent_it(stream_app: StreamApp,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """Nobody serves the capability, so no agent owns the letter: the app's owner (`reach apps create --owner`) is
    named by `reach dlq ls` and told when the letter turns DEAD."""
    monkeypatch.setenv("REACH_GATEWAY_SECRETS_KEY", Fernet.generate_key().decode())
    capability = f"unserved.c{uuid.uuid4().hex[:6]}"
    with listening(Receiver()) as receiver:
        owner = f"webhook:{receiver.url}/hook"
        made = reach_cli("apps", "create", "shop", "--owner", owner, "--json")
        assert made.returncode == 0, made.stderr
        app_id = json.loads(made.stdout)["app_id"]
        bad = reach_cli("apps", "update", app_id, "--owner", "carrier-pigeon:roof")
        assert bad.returncode != 0 and "not a channel target" in bad.stderr + bad.stdout
        done = reach_cli("policy", "set", "--capability", capability, "--dead-after", "3s")
        assert done.returncode == 0, done.stderr
        with running(webhook_agent()), Client(source=f"gateway:{app_id}") as client:  # what the gateway stamps
            wait_for(lambda: "agent://channels/webhook" in {
                a["agent_id"] for a in stream_app.get("/agents") if a["state"] == "READY"}, 90,  # type: ignore[union-attr]
                "the webhook agent READY")
            message_id = client.send(capability, {"n": 1}, expire_at=now_ms() + 600_000)  # waits: dead-lettered
            wait_for(lambda: letters(capability, message_id, dead=True), 90, "the NO_ROUTE letter DEAD",
                     interval=0.5)
            [row] = letters(capability, message_id, dead=True)
            assert row["owner"] == owner and row["reason"] == "NO_ROUTE"
            wait_for(lambda: receiver.posts(), 60, "the app's owner told through the webhook", interval=0.5)
            [hit] = receiver.posts()
            body = json.loads(hit.body)
            assert body["kind"] == "dead_letter" and body["message_id"] == message_id
