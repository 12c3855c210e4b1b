"""The request path on the in-memory bus, the real workers in one process (memory_stack): a request to its reply,
a retry through a delay tier, a reroute after a delivery timeout. They complement the integration tests, which
run the same stories against the real broker and Redis."""

from __future__ import annotations

from typing import Any

from reach.agent import Agent, Context
from reach.agent.signals import TransientError
from reach.client import Client
from reach.envelopes import now_ms
from reach.kafka import clients, codec, topics
from reach.records import AgentRegistration, AgentState, Capability, Status
from tests.unit.e2e.memory_stack import MemoryStack, wait_for

CAPABILITY = "e2e.echo"


def _echo(*, fail_first: bool = False) -> Agent:
    """An echo agent; with `fail_first`, its first attempt of every message fails transiently (retry in 0.2 s)."""
    agent = Agent("agent://e2e/echo", max_concurrency=2)

    @agent.capability(CAPABILITY, version="1.0.0", input_schema={"type": "object"}, output_schema={"type": "object"})
    async def echo(payload: dict[str, Any], ctx: Context) -> dict[str, Any]:
        if fail_first and ctx.attempt == 1:
            raise TransientError("first attempts fail", retry_after=0.2)
        return {"echo": payload, "attempt": ctx.attempt}

    return agent


def _completed(stack: MemoryStack, message_id: str) -> Any:
    row = stack.row(message_id)
    return row if row is not None and row.status is Status.COMPLETED else None


def test_a_request_is_routed_handled_and_answered(stack: MemoryStack) -> None:
    runner = stack.run_agent(_echo())
    with Client() as client:
        receipt = client.invoke_receipt(CAPABILITY, {"n": 1}, timeout_ms=5_000)
    assert receipt.status is Status.COMPLETED and receipt.instance_id == runner.agent.instance_id
    assert receipt.result is not None
    row = wait_for(lambda: _completed(stack, receipt.message_id), 5, "the status row COMPLETED")
    assert row.attempt == 1 and row.instance_id == runner.agent.instance_id
    steps = [r["status"] for r in stack.receipts(receipt.message_id)]
    assert steps[0] == "ROUTED" and steps[-1] == "COMPLETED"
    # the run is started: a STARTED receipt, or (within the grace) the start time on its COMPLETED
    assert "STARTED" in steps or "started_at" in stack.receipts(receipt.message_id)[-1]["timings"]


def test_a_transient_failure_is_retried_through_a_delay_tier(stack: MemoryStack) -> None:
    stack.run_agent(_echo(fail_first=True))
    with Client() as client:
        result = client.invoke(CAPABILITY, {"n": 2}, timeout_ms=8_000)
    assert result == {"echo": {"n": 2}, "attempt": 2}
    assert stack.delays.forwarded == 1, "the retry went through a delay tier"
    done = wait_for(lambda: next((r for r in stack.rows() if r.status is Status.COMPLETED), None), 5,
                    "the status row COMPLETED")
    assert done.attempt == 2
    failed = [r for r in stack.receipts(done.message_id) if r["status"] == "ATTEMPT_FAILED"]
    assert [(r["attempt"], r["error"]["code"]) for r in failed] == [(1, "TRANSIENT")]


def test_an_undelivered_request_is_rerouted_after_the_delivery_timeout(stack: MemoryStack) -> None:
    # A registered instance that never consumes its inbox (frozen, or died after its heartbeat): the only
    # candidate when the request comes, so the router forwards it there.
    ghost = _ghost(stack)
    wait_for(lambda: any(r.instance_id == ghost.instance_id for r in stack.router.state.live(now_ms())), 5,
             "the ghost live in the router's registry")
    with Client() as client:
        # room for the agent started below to be live before the delivery timeout
        message_id = client.send(CAPABILITY, {"n": 3}, delivery_timeout_ms=2_000)
    first = wait_for(lambda: next((r for r in stack.receipts(message_id) if r["status"] == "ROUTED"), None), 5,
                     "the first ROUTED")
    assert first["instance_id"] == ghost.instance_id
    runner = stack.run_agent(_echo())
    wait_for(lambda: any(r.instance_id == runner.agent.instance_id for r in stack.router.state.live(now_ms())), 5,
             "the agent live in the router's registry before the delivery timeout reroutes")
    row = wait_for(lambda: _completed(stack, message_id), 8, "the rerouted request COMPLETED")
    assert row.instance_id == runner.agent.instance_id and row.reroutes == 1 and row.attempt == 1
    routed = [r for r in stack.receipts(message_id) if r["status"] == "ROUTED"]
    assert [r["instance_id"] for r in routed] == [ghost.instance_id, runner.agent.instance_id]
    late = next(r for r in stack.receipts(message_id) if r["status"] == "ACCEPTED")
    assert late["error"]["code"] == "DELIVERY_TIMEOUT" and late["at"] - first["at"] >= 2_000


OBJECT = '{"type": "object"}'  # the echo agent's contract: one capability version, one contract


def _ghost(stack: MemoryStack) -> AgentRegistration:
    agent_id = "agent://e2e/ghost"
    inbox = stack.names.inbox(agent_id)
    admin = clients.admin(stack.kafka)
    topics.ensure_topic(admin, inbox, topics.load(stack.settings.topics_file).family("agent"))
    partitions = len(admin.list_topics(inbox).topics[inbox].partitions)
    reg = AgentRegistration(agent_id=agent_id, instance_id="ghost-1", build_version="test",
                            capabilities=[Capability(name=CAPABILITY, version="1.0.0", input_schema=OBJECT,
                                                       output_schema=OBJECT)],
                            max_concurrency=10,
                            state=AgentState.READY, heartbeat_at=now_ms(), ttl_ms=60_000, inflight=0,
                            assigned_partitions=list(range(partitions)),
                            inbox_topic=inbox)
    producer = clients.producer(stack.kafka)
    producer.produce(stack.names.registry, key=reg.instance_id.encode(), value=codec.encode(reg))
    assert producer.flush(5) == 0
    return reg
