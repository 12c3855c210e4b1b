"""Sessions that survive (issue 25 item 6) on the real broker: a session of 50 requests keeps one instance across
a router SIGKILL and restart, and so do eight shorter sessions beside it (by chance alone each would keep its
instance about half the time: the restarted router knows them from the sessions topic, not from its memory)."""

from __future__ import annotations

from typing import Any

import pytest

from reach.agent import Agent, Context
from reach.client import Client
from reach.names import Names
from reach.records import Receipt, Status
from tests.integration.agent_support import Receipts, TopicReader, all_running, owning_partitions, wait_for
from tests.integration.stream_app import StreamApp

pytestmark = pytest.mark.integration
AGENTS = ("agent://test/sticky-a", "agent://test/sticky-b")
SHORT = [f"short-{n}" for n in range(8)]


def _agent(agent_id: str) -> Agent:
    agent = Agent(agent_id, ttl_ms=3000, max_concurrency=8, drain_grace_s=5)

    @agent.capability("test.sticky", version="1.0.0", input_schema={"type": "object"})
    def turn(payload: dict[str, Any], ctx: Context) -> dict[str, Any]:
        return {"turn": payload["turn"]}

    return agent


def _send(client: Client, session: str, turns: range) -> list[str]:
    return [client.send("test.sticky", {"turn": t}, session_key=session) for t in turns]


def _served_by(receipts: dict[str, list[Receipt]], ids: list[str]) -> set[str | None]:
    return {r.instance_id for m in ids for r in receipts[m] if r.status is Status.COMPLETED}


def test_a_session_keeps_its_instance_across_a_router_sigkill(namespace: str, stream_app: StreamApp) -> None:
    names = Names(namespace)
    agents = [_agent(a) for a in AGENTS]
    with all_running(agents), Client() as client:
        wait_for(lambda: owning_partitions(names, agents), 60, "both instances READY")
        receipts = Receipts(names.receipts)
        before = {"main": _send(client, "main", range(25)), **{s: _send(client, s, range(2)) for s in SHORT}}
        receipts.wait_status([m for ids in before.values() for m in ids], Status.COMPLETED, timeout=60)

        stream_app.kill()  # SIGKILL: no clean shutdown, its memory is gone
        stream_app.start()

        after = {"main": _send(client, "main", range(25, 50)), **{s: _send(client, s, range(2, 4)) for s in SHORT}}
        seen = receipts.wait_status([m for ids in after.values() for m in ids], Status.COMPLETED, timeout=60)
        sessions = TopicReader(names.sessions).poll(1.0)
    assert len(before["main"] + after["main"]) == 50
    for session in before:
        served = _served_by(seen, before[session] + after[session])
        assert len(served) == 1, f"session {session} moved between instances: {served}"
    assert len(sessions) == 9, "one record per session (its start), not one per request: 9 for 82 requests"
