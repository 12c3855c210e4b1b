"""Fan-out on the real broker and Redis (issue 25 item 1): three subscribers of `demo.order.created`
(`demo/audit` x2 instances, `demo/notify` x1), 200 events. Each agent sees each event exactly once, its instances
sharing them; `demo/notify` is killed mid-run and `demo/audit` keeps up without it; notify's deliveries complete
after it restarts, and every parent ends COMPLETED with both subscribers on its row. A subscriber that registers
later gets the events routed after it is READY, none before, and the workers keep serving. (A handler beside the
subscribers is no longer refused: tests/integration/test_subscribers_beside_a_handler.py.)"""

from __future__ import annotations

import json
import signal
from typing import Any

import httpx
import pytest
from typer.testing import CliRunner

from reach.cli import app as reach_app
from reach.client import Client
from reach.redisclient import sync_client
from reach.settings import ReachSettings, RedisSettings
from tests.integration.agent_support import spawn, wait_for
from tests.integration.stream_app import StreamApp

pytestmark = pytest.mark.integration

AUDIT, NOTIFY, LATE = "agent://demo/audit", "agent://demo/notify", "agent://demo/late"
EVENTS = 200


def instances(app: StreamApp, agent_id: str) -> int:
    """READY instances of the agent that own inbox partitions (what the router routes to)."""
    return sum(1 for a in app.get("/agents")  # type: ignore[union-attr]
               if a["agent_id"] == agent_id and a["state"] == "READY" and a["assigned_partitions"])


def row(app: StreamApp, message_id: str) -> dict[str, Any] | None:
    found = app.get(f"/messages/{message_id}")
    return None if "_status" in found else found


def test_every_subscriber_sees_every_event_once_and_a_killed_one_catches_up(
        namespace: str, stream_app: StreamApp) -> None:
    redis = sync_client(RedisSettings().url())
    ns = ReachSettings().namespace
    procs = [spawn("examples.audit_agent:agent"), spawn("examples.audit_agent:agent"),
             spawn("examples.notify_agent:agent")]
    try:
        wait_for(lambda: instances(stream_app, AUDIT) == 2 and instances(stream_app, NOTIFY) == 1, 90,
                 "audit x2 and notify READY", interval=0.3)
        with Client() as client:
            def send(start: int, end: int) -> list[str]:
                return [client.send("demo.order.created", {"order_id": f"o-{i}", "amount": i})
                        for i in range(start, end)]
            ids = send(0, 60)
            wait_for(lambda: redis.scard(f"{ns}:notify:events") >= 20, 60, "notify at work", interval=0.1)
            procs[2].send_signal(signal.SIGKILL)  # mid-run: no drain, no tombstone
            procs[2].wait(30)
            ids += send(60, 150)
            # audit is not held by the dead subscriber: it sees every event so far while notify is down
            wait_for(lambda: redis.scard(f"{ns}:audit:events") >= 150 or None, 60, "audit keeps up", interval=0.2)
            notified_while_down = redis.scard(f"{ns}:notify:events")
            assert notified_while_down < 150
            procs[2] = spawn("examples.notify_agent:agent")
            procs.append(spawn("tests.integration.late_subscriber:agent"))  # subscribes from now on
            wait_for(lambda: instances(stream_app, LATE) == 1, 90, "the late subscriber READY", interval=0.2)
            ids += send(150, EVENTS)

        def open_parents() -> list[str]:
            rows = {mid: row(stream_app, mid) for mid in ids}
            return [mid for mid, r in rows.items() if r is None or r["status"] != "COMPLETED"]

        wait_for(lambda: not open_parents() or None, 120, "every event's fan-out COMPLETED", interval=0.5)
        events = set(ids)
        assert {e.decode() for e in redis.smembers(f"{ns}:audit:events")} == events
        assert {e.decode() for e in redis.smembers(f"{ns}:notify:events")} == events
        assert {e.decode() for e in redis.smembers(f"{ns}:late:events")} == set(ids[150:]), "none from before it"
        audit_runs = {k.decode(): int(v) for k, v in redis.hgetall(f"{ns}:audit:runs").items()}
        assert sum(audit_runs.values()) == EVENTS, "audit ran each event once"
        assert len(audit_runs) == 2 and min(audit_runs.values()) > 0, f"its instances share them: {audit_runs}"

        parent = row(stream_app, ids[100])  # published while notify was down
        assert parent is not None and parent["status"] == "COMPLETED"
        deliveries = {d["agent_id"]: d for d in parent["fanout"]["deliveries"]}
        assert set(deliveries) == {AUDIT, NOTIFY}
        assert {d["status"] for d in deliveries.values()} == {"COMPLETED"}
        notify_row = row(stream_app, deliveries[NOTIFY]["message_id"])
        assert notify_row is not None and notify_row["fanout"]["of"] == ids[100]
        assert json.loads(notify_row["result"])["event"] == ids[100]

        shown = CliRunner().invoke(reach_app, ["status", ids[100]])
        assert shown.exit_code == 0, shown.output
        assert "fan-out: 2/2 deliveries completed" in shown.output and deliveries[NOTIFY]["message_id"] in shown.output
        trace = CliRunner().invoke(reach_app, ["trace", parent["trace_id"], "--json"])
        assert {r["message_id"] for r in json.loads(trace.stdout)["messages"]} == {
            ids[100], deliveries[AUDIT]["message_id"], deliveries[NOTIFY]["message_id"]}
        last = row(stream_app, ids[-1])
        assert last is not None and {d["agent_id"] for d in last["fanout"]["deliveries"]} == {AUDIT, NOTIFY, LATE}
        assert httpx.get(stream_app.url + "/healthz", timeout=5).json()["ok"], "no worker stopped"
    finally:
        for proc in procs:
            proc.terminate()
        for proc in procs:
            proc.wait(60)
