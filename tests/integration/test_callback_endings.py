"""A callback on every ending (issue 25 item 5), on the real broker and Redis with a real HTTP receiver behind the
webhook channel: a request that EXPIRES before any agent started it (the timekeeper's ending), one nobody serves
(the router's UNROUTABLE), one every instance is too busy for (the router's OVERLOAD) and one cancelled before it
started (the agent's CANCELED) each call back exactly once."""

from __future__ import annotations

import json
import threading
from collections import Counter
from typing import Any

import pytest
from pydantic import SecretStr

from reach.agent import Agent
from reach.channels.agent import channel_agent
from reach.channels.settings import ChannelSettings, ClosureSettings
from reach.client import Client
from reach.names import Names
from reach.settings import KafkaSettings, ReachSettings, RedisSettings
from tests.integration.agent_support import reach_cli, running, wait_for
from tests.integration.channel_servers import Receiver, listening
from tests.integration.router_helpers import Instance, ensure
from tests.integration.stream_app import StreamApp

pytestmark = pytest.mark.integration
RELEASE = threading.Event()


def holding() -> Agent:
    """One request at a time, each held until the test releases it: the next one waits, not started."""
    agent = Agent("agent://test/hold", max_concurrency=1)

    @agent.capability("test.hold", version="1.0.0", input_schema={"type": "object"})
    async def hold(payload: dict[str, Any]) -> dict[str, Any]:
        import asyncio

        while not RELEASE.is_set():
            await asyncio.sleep(0.05)
        return payload

    return agent


def row(app: StreamApp, message_id: str) -> dict[str, Any] | None:
    found = app.get(f"/messages/{message_id}")
    return None if "_status" in found else found


def test_every_ending_calls_back_once(namespace: str, stream_app: StreamApp) -> None:
    names = Names(namespace)
    ensure(names, names.capability("demo.nobody"))
    ghost = Instance(names, "ghost-1", agent_id="agent://demo/ghost", capability="demo.ghost", version="1.0.0")
    busy = Instance(names, "busy-1", agent_id="agent://demo/busy", capability="demo.busy", version="1.0.0",
                    inflight=1, max_concurrency=1)
    ghost.heartbeat()  # registered, never consumes: what it is handed is never started
    busy.heartbeat()  # registered, every slot taken: the router answers OVERLOAD
    webhook = channel_agent("webhook", settings=ChannelSettings(webhook_secret=SecretStr("wh"), timeout_s=2,
                                                                webhook_allow_private=True), kafka=KafkaSettings(),
                            redis=RedisSettings(), reach=ReachSettings(), closure=ClosureSettings())
    RELEASE.clear()
    with listening(Receiver()) as receiver, running(webhook), running(holding()), Client() as client:
        def ready() -> bool:
            seen = {a["instance_id"]: a["state"] for a in stream_app.get("/agents")}  # type: ignore[union-attr]
            agents = {a["agent_id"] for a in stream_app.get("/agents") if a["state"] == "READY"}  # type: ignore[union-attr]
            return {"ghost-1", "busy-1"} <= set(seen) and {"agent://channels/webhook", "agent://test/hold"} <= agents

        wait_for(ready, 90, "the instances and agents READY", interval=0.3)
        hook = f"webhook:{receiver.url}/hook"
        # the router subscribes a capability topic a moment after its first registration: a probe ROUTED to the
        # ghost shows it does, so the 2 s budget below is spent waiting at the ghost, not for the subscription
        probe = client.send("demo.ghost", {"n": 0})
        wait_for(lambda: (row(stream_app, probe) or {}).get("status") == "ROUTED", 60, "the probe ROUTED",
                 interval=0.2)
        expired = client.send("demo.ghost", {"n": 1}, callback=hook, budget_ms=2_000, delivery_timeout_ms=30_000)
        unroutable = client.send("demo.nobody", {"n": 2}, callback=hook)
        # its one slot taken and no queue: the router answers OVERLOAD (its 2 s budget is shorter than a wait there)
        overload = client.send("demo.busy", {"n": 3}, callback=hook, budget_ms=2_000)
        first = client.send("test.hold", {"n": 4})
        wait_for(lambda: (row(stream_app, first) or {}).get("status") == "STARTED", 60, "the held request STARTED",
                 interval=0.2)
        canceled = client.send("test.hold", {"n": 5}, callback=hook)  # waits behind the first: max_concurrency 1
        wait_for(lambda: (row(stream_app, canceled) or {}).get("status") == "ROUTED", 60, "the second ROUTED",
                 interval=0.2)
        done = reach_cli("cancel", canceled, "--json")
        assert done.returncode == 0, done.stderr
        RELEASE.set()

        expect = {expired: "EXPIRED", unroutable: "UNROUTABLE", overload: "FAILED", canceled: "CANCELED"}

        def all_called_back() -> dict[str, dict[str, Any]] | None:
            bodies = {json.loads(h.body)["message_id"]: json.loads(h.body) for h in receiver.posts()}
            return bodies if set(expect) <= set(bodies) else None

        bodies = wait_for(all_called_back, 90, "a callback for every ending", interval=0.3)
        assert {mid: bodies[mid]["status"] for mid in expect} == expect
        assert bodies[overload]["error"]["code"] == "OVERLOAD"
        assert row(stream_app, expired)["timeline"][0]["status"] == "ROUTED"  # type: ignore[index]
        assert "STARTED" not in [s["status"] for s in row(stream_app, expired)["timeline"]]  # type: ignore[index]
        # exactly once each: the rows say their callback went, and no message was called back twice
        for mid in expect:
            wait_for(lambda m=mid: (row(stream_app, m) or {}).get("callback_sent"), 30, f"{mid} callback_sent")
        counts = Counter(json.loads(h.body)["message_id"] for h in receiver.posts())
        assert all(counts[mid] == 1 for mid in expect), counts
