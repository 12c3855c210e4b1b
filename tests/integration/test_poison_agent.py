"""The agent's entries of the poison suite: bad payloads, oversize results and handlers that raise
CancelledError end in a clear receipt, the instances keep running, and the next good message COMPLETES;
a redelivered failed attempt does not fork its retry chain; a sync handler stuck past its timeout keeps its slot
(its capability not declared idempotent, the cut attempt ends FAILED MAYBE_RAN, never rerun)."""

from __future__ import annotations

import asyncio
import threading
from contextlib import ExitStack
from typing import Any

from reach.agent import Agent, Context, TransientError
from reach.client import Client
from reach.envelopes import now_ms
from reach.errors import InfraUnavailable
from reach.names import Names
from reach.records import Envelope, Status
from reach.registry import read_registry
from reach.settings import KafkaSettings
from tests.integration.agent_support import Receipts, TopicReader, running, starts, wait_for, with_starts

AGENT = "agent://test/poison"


def _agent() -> Agent:
    agent = Agent(AGENT, ttl_ms=3000, max_concurrency=2, lease_margin_ms=500, drain_grace_s=10)

    @agent.capability("test.poison", version="1.0.0", input_schema={"type": "object"})
    async def handle(payload: dict[str, Any]) -> Any:
        match payload.get("do"):
            case "huge":
                return {"blob": "x" * 1_200_000}
            case "cancel":
                raise asyncio.CancelledError()
        return payload

    return agent


def _ready(names: Names, agents: list[Agent]) -> bool:
    try:
        live = read_registry(KafkaSettings(), names).live(now_ms())
    except InfraUnavailable:  # a just-created topic may not be in the metadata yet
        return False
    owned = {r.instance_id: r.assigned_partitions for r in live}
    return all(owned.get(a.instance_id) for a in agents)


def _alive(threads: list[threading.Thread]) -> bool:
    return all(t.is_alive() for t in threads)


def test_a_deeply_nested_payload_is_rejected_and_both_instances_keep_working(namespace: str) -> None:
    names = Names(namespace)
    agents = [_agent(), _agent()]
    with ExitStack() as stack, Client() as client:
        threads = [stack.enter_context(running(a)) for a in agents]
        wait_for(lambda: _ready(names, agents), 60, "two READY instances sharing the inbox")
        receipts = Receipts(names.receipts)
        inbox = names.inbox(AGENT)
        # 100,000 nested `[`: 100 KB, under the payload limit, past the JSON parser's recursion limit
        deep = client.envelope("test.poison", {}).model_copy(update={"payload": b"[" * 100_000})
        client.publish(deep, topic=inbox, partition=0)
        good = client.envelope("test.poison", {"after": "deep"})
        client.publish(good, topic=inbox, partition=0)
        seen = receipts.wait_status([deep.message_id], Status.REJECTED)
        seen = receipts.wait_status([good.message_id], Status.COMPLETED)
        assert _alive(threads), "an instance stopped"
    [rejected] = seen[deep.message_id]
    assert rejected.status is Status.REJECTED and rejected.error and rejected.error.code == "INVALID_JSON"
    assert "nested too deeply" in rejected.error.message


def test_a_result_too_large_for_a_receipt_fails_and_its_redelivery_does_not_crash(namespace: str) -> None:
    names = Names(namespace)
    agent = _agent()
    with running(agent) as thread, Client() as client:
        wait_for(lambda: _ready(names, [agent]), 60, "READY")
        receipts = Receipts(names.receipts)
        inbox = names.inbox(AGENT)
        huge = client.envelope("test.poison", {"do": "huge"})
        client.publish(huge, topic=inbox, partition=1)
        client.publish(huge, topic=inbox, partition=1)  # a redelivery of the same message
        good = client.envelope("test.poison", {"after": "huge"})
        client.publish(good, topic=inbox, partition=1)
        receipts.wait_status([good.message_id], Status.COMPLETED)
        seen = wait_for(lambda: (lambda s: s if len([r for r in s.get(huge.message_id, [])
                                                     if r.status is Status.FAILED]) == 2 else None)(
            receipts.by_message()), 30, "a FAILED receipt for the message and for its redelivery")
        assert thread.is_alive()
    failed = [r for r in seen[huge.message_id] if r.status is Status.FAILED]
    assert {r.error.code for r in failed if r.error} == {"RESULT_TOO_LARGE"}
    assert failed[1].timings.get("cache_hit") == 1, "the redelivery republished the cached FAILED"
    assert len(starts(seen[huge.message_id])) == 1, "the handler ran once"


def test_a_handler_raising_cancelled_error_is_retried_not_committed_as_done(namespace: str) -> None:
    names = Names(namespace)
    agent = _agent()
    with running(agent), Client() as client:
        wait_for(lambda: _ready(names, [agent]), 60, "READY")
        receipts = Receipts(names.receipts)
        cancel = client.envelope("test.poison", {"do": "cancel"})
        client.publish(cancel, topic=names.inbox(AGENT), partition=1)
        seen = receipts.wait_status([cancel.message_id], Status.RETRY_SCHEDULED)
    statuses = [r.status for r in seen[cancel.message_id]]
    assert statuses == [Status.STARTED, Status.ATTEMPT_FAILED, Status.RETRY_SCHEDULED]
    failed = seen[cancel.message_id][1]
    assert failed.error and failed.error.code == "CANCELLED"
    tier = TopicReader(names.retry("1s"))
    [retry] = wait_for(lambda: [r for r in tier.poll() if r.headers.get("x-reach-message-id")
                                == cancel.message_id.encode()], 20, "the retry on the 1s tier")
    from reach.kafka import codec

    assert codec.decode(retry.value or b"", Envelope).attempt == 2


def test_a_redelivered_failed_attempt_republishes_its_retry_instead_of_rerunning(namespace: str) -> None:
    names = Names(namespace)
    runs: list[str] = []
    agent = Agent("agent://test/forks", ttl_ms=3000, max_concurrency=1, lease_margin_ms=500, drain_grace_s=10)

    @agent.capability("test.forks", version="1.0.0")
    def flaky(payload: Any, ctx: Context) -> Any:
        runs.append(ctx.envelope.message_id)
        raise TransientError("down")

    with running(agent), Client() as client:
        wait_for(lambda: _ready(names, [agent]), 60, "READY")
        receipts = Receipts(names.receipts)
        env = client.envelope("test.forks", {"n": 1})
        inbox = names.inbox("agent://test/forks")
        client.publish(env, topic=inbox, partition=0)
        client.publish(env, topic=inbox, partition=0)  # the same attempt delivered again
        tier = TopicReader(names.retry("1s"))
        retries = wait_for(lambda: (lambda r: r if len(r) == 2 else None)(
            [x for x in tier.poll() if x.headers.get("x-reach-message-id") == env.message_id.encode()]),
            30, "a retry record for each delivery")
        seen = receipts.wait_status([env.message_id], Status.RETRY_SCHEDULED)
    assert runs == [env.message_id], "the handler ran once"
    assert retries[0].value == retries[1].value, "the same next attempt, not a second decision"
    assert retries[0].headers["x-reach-due-at"] == retries[1].headers["x-reach-due-at"]
    assert len(starts(seen[env.message_id])) == 1


def test_a_sync_handler_past_its_timeout_keeps_its_slot_so_new_work_does_not_time_out_unrun(namespace: str) -> None:
    names = Names(namespace)
    gate = threading.Event()
    ran: list[int] = []
    agent = Agent("agent://test/stuck", ttl_ms=900, max_concurrency=1, lease_margin_ms=500, drain_grace_s=10)

    @agent.capability("test.stuck", version="1.0.0")
    def stuck(payload: Any) -> Any:
        ran.append(payload["n"])
        if payload["n"] == 0:
            gate.wait(30)  # a sync handler Python cannot interrupt
        return payload

    def inflight_since(at: int) -> int | None:
        """`inflight` of this instance's latest heartbeat, if that heartbeat is newer than `at`."""
        try:
            live = read_registry(KafkaSettings(), names).live(now_ms())
        except InfraUnavailable:
            return None
        mine = [r for r in live if r.instance_id == agent.instance_id and r.heartbeat_at > at]
        return mine[0].inflight if mine else None

    with running(agent) as thread, Client() as client:
        wait_for(lambda: _ready(names, [agent]), 60, "READY")
        receipts = Receipts(names.receipts)
        inbox = names.inbox("agent://test/stuck")
        first = client.envelope("test.stuck", {"n": 0}, execution_timeout_ms=300)
        client.publish(first, topic=inbox, partition=0)
        timed_out = receipts.wait_status([first.message_id], Status.FAILED)[first.message_id]
        failed_at = next(r.at for r in timed_out if r.status is Status.FAILED)
        second = client.envelope("test.stuck", {"n": 1}, execution_timeout_ms=300)
        client.publish(second, topic=inbox, partition=1)
        # its attempt is over, but its thread still runs: the heartbeat still counts it
        wait_for(lambda: inflight_since(failed_at) == 1 or None, 20, "a heartbeat with the lingering thread counted")
        assert ran == [0], "nothing else was handed to the busy pool"
        gate.set()
        seen = receipts.wait_status([second.message_id], Status.COMPLETED)
        assert thread.is_alive()
    assert with_starts(seen[second.message_id]) == [Status.STARTED, Status.COMPLETED]
    [failed] = [r for r in timed_out if r.status is Status.FAILED]
    assert failed.error and failed.error.code == "MAYBE_RAN" and failed.error.message.startswith("EXECUTION_TIMEOUT")
    assert ran == [0, 1], "the cut run was not run again"
