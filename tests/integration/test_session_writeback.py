"""A session's snapshot written back (issue 41 item 1b) on the real broker: a handler writes `ctx.session`, the
instance that ran it stops, the router is killed and restarted, and the session's next request runs on the other
instance of the agent and sees what the first wrote (the router carries it, learned from the sessions topic)."""

from __future__ import annotations

import json
from contextlib import ExitStack
from typing import Any

import pytest

from reach.agent import Agent, Context
from reach.client import Client
from reach.core.sessionmap import MAX_SNAPSHOT_BYTES, decode_record
from reach.invoke import InvokeFailed
from reach.names import Names
from tests.integration.agent_support import TopicReader, owning_partitions, running, wait_for
from tests.integration.stream_app import StreamApp

pytestmark = pytest.mark.integration
AGENT = "agent://test/notes"


def _agent() -> Agent:
    agent = Agent(AGENT, ttl_ms=3000, max_concurrency=4, drain_grace_s=5)

    @agent.capability("test.notes", version="1.0.0", input_schema={"type": "object"})
    def note(payload: dict[str, Any], ctx: Context) -> dict[str, Any]:
        seen = json.loads(json.dumps(ctx.session))  # what this run was given, before it writes
        if payload.get("big"):
            ctx.session["big"] = "x" * (MAX_SNAPSHOT_BYTES + 1)
        else:
            ctx.session["notes"] = [*ctx.session.get("notes", []), payload["note"]]
        return {"seen": seen, "by": ctx.instance_id}

    return agent


def test_the_next_request_of_a_session_sees_the_snapshot_across_instances_and_a_router_restart(
        namespace: str, stream_app: StreamApp) -> None:
    names = Names(namespace)
    agents = [_agent(), _agent()]  # two instances of one agent
    stacks = {a.instance_id: ExitStack() for a in agents}
    try:
        for agent in agents:
            stacks[agent.instance_id].enter_context(running(agent))
        wait_for(lambda: owning_partitions(names, agents), 60, "both instances READY")
        with Client() as client:
            first = client.invoke("test.notes", {"note": "first"}, session_key="conv-1", timeout_ms=30_000)
            assert first["seen"] == {}, "a new session starts empty"

            stacks.pop(first["by"]).close()  # the instance that ran it stops: the next one cannot remember it
            stream_app.kill()  # and the router forgets everything it held in memory
            stream_app.start()

            second = client.invoke("test.notes", {"note": "second"}, session_key="conv-1", timeout_ms=30_000)
            other = client.invoke("test.notes", {"note": "alone"}, session_key="conv-2", timeout_ms=30_000)
            with pytest.raises(InvokeFailed) as too_large:
                client.invoke("test.notes", {"big": True}, session_key="conv-1", timeout_ms=30_000)
            third = client.invoke("test.notes", {"note": "third"}, session_key="conv-1", timeout_ms=30_000)
        records = TopicReader(names.sessions).poll(1.0)
    finally:
        for stack in stacks.values():
            stack.close()
    assert second["by"] != first["by"], "the second request ran on the other instance"
    assert second["seen"] == {"notes": ["first"]}, "it sees what the first request's handler wrote"
    assert other["seen"] == {}, "another session has its own snapshot"
    assert too_large.value.receipt.error is not None
    assert too_large.value.receipt.error.code == "SESSION_TOO_LARGE"
    assert third["seen"] == {"notes": ["first", "second"]}, "a failed run writes nothing back"
    written = [decode_record(r.value) for r in records if r.value is not None]
    assert any(w.snapshot == '{"notes":["first","second","third"]}' for w in written), \
        "the snapshot is on the compacted sessions topic, where a restarted router reads it"
