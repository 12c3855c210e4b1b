"""The timekeeper on the real broker: an instance that never starts its work loses it to another one after
the delivery timeout (not an attempt), and a budget shorter than the work ends EXPIRED for the caller."""

from __future__ import annotations

import pytest

from reach.client import Client
from reach.invoke import InvokeTimeout
from reach.names import Names
from reach.records import Receipt, Status
from tests.integration.agent_support import Receipts, spawn, wait_for
from tests.integration.router_helpers import Instance
from tests.integration.stream_app import StreamApp

pytestmark = pytest.mark.serial  # budgets of 1.5 s against a 4 s handler: a starved agent changes the story


def test_undelivered_request_is_rerouted_after_the_delivery_timeout(namespace: str, stream_app: StreamApp) -> None:
    echo = spawn("examples.echo_agent:agent")
    try:
        wait_for(lambda: any(a["agent_id"] == "agent://demo/echo" and a["state"] == "READY"
                             for a in stream_app.get("/agents")), 60, "echo READY")
        # A registered instance that never consumes (its process died after the heartbeat), and is the
        # better pick for this region, so the router sends the request there first.
        ghost = Instance(Names(namespace), "ghost-1", agent_id="agent://demo/ghost", capability="demo.echo",
                         version="1.0.0", region="ghost-land", partitions=list(range(8)))
        ghost.heartbeat()
        wait_for(lambda: any(a["instance_id"] == "ghost-1" for a in stream_app.get("/agents")), 30, "ghost seen")
        receipts = Receipts(f"{namespace}.receipts")
        with Client() as client:
            mid = client.send("demo.echo", {"x": 1}, region="ghost-land", delivery_timeout_ms=1_500)
        seen = receipts.wait_status([mid], Status.COMPLETED, timeout=60)[mid]
    finally:
        echo.terminate()
        echo.wait(60)
    routed = [r for r in seen if r.status is Status.ROUTED]
    assert routed[0].instance_id == "ghost-1" and routed[1].instance_id != "ghost-1"
    assert routed[1].reroutes == 1
    late = next(r for r in seen if r.status is Status.ACCEPTED)
    assert late.error and late.error.code == "DELIVERY_TIMEOUT"
    assert late.at - routed[0].at >= 1_500, "not rerouted before the delivery timeout"
    done = next(r for r in seen if r.status is Status.COMPLETED)
    assert done.attempt == 1, "a reroute does not count as an attempt"
    assert stream_app.get(f"/messages/{mid}")["status"] == "COMPLETED"


def test_a_budget_shorter_than_the_work_ends_expired_and_invoke_times_out(namespace: str,
                                                                         stream_app: StreamApp) -> None:
    slow = spawn("tests.integration.slow_agent:agent")
    try:
        wait_for(lambda: any(a["agent_id"] == "agent://test/slow" and a["state"] == "READY"
                             for a in stream_app.get("/agents")), 60, "slow agent READY")
        with Client() as client:
            # READY is the heartbeat, not the consumer's assignment: one quick request first, so the 1.5 s budget
            # below is spent on the handler, not on the agent joining its group (this test reran in two CIs)
            assert client.invoke("test.slow", {"n": 0}, timeout_ms=60_000)["n"] == 0
            with pytest.raises(InvokeTimeout) as raised:
                client.invoke("test.slow", {"slow": 4, "n": 1}, budget_ms=1_500, execution_timeout_ms=10_000,
                              timeout_ms=20_000)
        receipt = raised.value.receipt
        assert receipt is not None and receipt.status is Status.EXPIRED
        # the handler must have started before the agent is stopped: a stopping agent starts no handler for a
        # partition it is giving up (reach.agent.ownership), and on a busy machine the record may still be queued
        Receipts(f"{namespace}.receipts").wait_status([receipt.message_id], Status.STARTED, 30)
    finally:
        slow.terminate()
        slow.wait(60)
    row = stream_app.get(f"/messages/{receipt.message_id}")
    assert row["status"] == "EXPIRED"
    # The handler finishes after the timekeeper ended the message: first terminal wins (reach.terminals), so the
    # agent publishes that EXPIRED again, never a COMPLETED beside it.
    receipts = Receipts(f"{namespace}.receipts")

    def both_ends() -> list[Receipt] | None:
        ends = [r for r in receipts.by_message().get(receipt.message_id, []) if r.status.is_terminal]
        return ends if len(ends) >= 2 else None

    ends = wait_for(both_ends, 30, "the agent's terminal after the handler finished")
    assert {r.status for r in ends} == {Status.EXPIRED}, "one terminal outcome: the first"
    assert stream_app.get(f"/messages/{receipt.message_id}")["status"] == "EXPIRED", "first terminal wins"
