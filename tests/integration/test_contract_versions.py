"""What a capability's contract and `idempotent` declaration do, on the real broker, Redis and router (issue 41
items 1a and 5, docs/decisions/0075).

schema_version: the SDK's Client and AsyncClient and the gateway's /v1 stamp the contract version they checked
the request against (the gateway's admission is the one A2A, MCP and gRPC share); a request checked against a
contract the instance does not serve (as a raw producer may write it) ends REJECTED with the reason before its
handler runs, and the next request on the same inbox partition completes; an envelope with no schema_version is
not compared.

idempotent: (a) a handler that outlives its execution timeout, of a capability not declared idempotent, ends FAILED
MAYBE_RAN with the attempt's evidence and ran once; (b) the same on an idempotent capability is retried and
completes; (c) two sends with the same payload and no idempotency_key to an idempotent capability run once.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from reach.agent import Agent, Context
from reach.aioclient import AsyncClient
from reach.client import Client
from reach.envelopes import new_envelope, now_ms
from reach.kafka import codec
from reach.names import Names
from reach.records import Envelope, Receipt, Status
from reach.registry import read_registry
from reach.settings import KafkaSettings
from tests.integration.agent_support import Receipts, TopicReader, running, wait_for
from tests.integration.gateway_fixtures import gateway  # noqa: F401 - the fixture
from tests.integration.stream_app import StreamApp
from tests.integration.test_gateway_http import Gateway

pytestmark = pytest.mark.integration


def registered(namespace: str, agent: Agent) -> None:
    wait_for(lambda: any(r.instance_id == agent.instance_id and r.assigned_partitions for r in read_registry(
        KafkaSettings(), Names(namespace), timeout=5).live(now_ms())), 60, "the instance READY with its partitions")


def statuses(receipts: list[Receipt]) -> list[Status]:
    return [r.status for r in receipts]


def ending(receipts: Receipts, message_id: str, status: Status, timeout: float = 60) -> Receipt:
    return next(r for r in receipts.wait_status([message_id], status, timeout=timeout)[message_id]
                if r.status is status)


def stamped(namespace: str, capability: str, message_id: str) -> Envelope:
    """The envelope as the broker holds it on its capability topic."""
    reader = TopicReader(Names(namespace).capability(capability))
    try:
        def found() -> Envelope | None:
            for record in reader.poll():
                envelope = codec.decode(record.value or b"", Envelope)
                if envelope.message_id == message_id:
                    return envelope
            return None

        return wait_for(found, 30, f"{message_id} on its capability topic")
    finally:
        reader.close()


@pytest.fixture
def echo() -> Iterator[tuple[Agent, str]]:
    capability = f"cv{uuid.uuid4().hex[:6]}.echo"
    agent = Agent(f"agent://cv/{capability.split('.')[0]}", max_concurrency=2, ttl_ms=3000)

    @agent.capability(capability, version="1.2.0", input_schema={"type": "object"})
    async def handle(payload: dict[str, Any]) -> dict[str, Any]:
        return payload

    with running(agent):
        yield agent, capability


def test_every_intake_stamps_the_contract_and_the_agent_rejects_a_mismatch(
        namespace: str, stream_app: StreamApp, gateway: Gateway, echo: tuple[Agent, str]) -> None:  # noqa: F811
    agent, capability = echo
    names = Names(namespace)
    receipts = Receipts(names.receipts)
    registered(namespace, agent)
    wait_for(lambda: any(f"{capability}@1.2.0" in a["capabilities"] for a in stream_app.get("/agents")), 60,
             "the router seeing the instance")

    with Client() as client:
        sent = client.envelope(capability, {"via": "sdk"}, version="^1")
        assert sent.schema_version == "1.2.0"
        client.publish(sent)
        assert ending(receipts, sent.message_id, Status.COMPLETED).result == b'{"via":"sdk"}'

        async def through_asyncio() -> Envelope:
            async with AsyncClient() as aio:
                envelope = await aio.envelope(capability, {"via": "asyncio"})
                await aio.publish(envelope)
                return envelope

        by_asyncio = asyncio.run(through_asyncio())
        assert by_asyncio.schema_version == "1.2.0"
        ending(receipts, by_asyncio.message_id, Status.COMPLETED)

        accepted = wait_for(lambda: (r := gateway.post("/v1/envelopes", {
            "capability": capability, "payload": {"via": "gateway"}})).status_code == 202 and r, 60,
            "the gateway's catalog knowing the capability")
        by_gateway = accepted.json()["message_id"]
        assert stamped(namespace, capability, by_gateway).schema_version == "1.2.0"
        ending(receipts, by_gateway, Status.COMPLETED)

        # as a raw producer may write them, into one inbox partition: a contract of another line, then none
        inbox = names.inbox(agent.agent_id)
        other_line = new_envelope(capability, {"via": "raw"}, schema_version="2.0.0")
        unstamped = new_envelope(capability, {"via": "raw, no contract"})
        assert unstamped.schema_version is None
        for envelope in (other_line, unstamped):
            client.publish(envelope, topic=inbox, partition=0)
    rejected = ending(receipts, other_line.message_id, Status.REJECTED)
    assert rejected.error and rejected.error.code == "SCHEMA_VERSION_MISMATCH"
    assert "checked against contract 2.0.0" in rejected.error.message and "serves 1.2.0" in rejected.error.message
    assert Status.STARTED not in statuses(receipts.by_message()[other_line.message_id]), "never run"
    assert ending(receipts, unstamped.message_id, Status.COMPLETED).result == b'{"via":"raw, no contract"}'


class Counted:
    """Handlers that count their runs per payload `n` and outlive the 600 ms timeout on the attempts asked to."""

    def __init__(self) -> None:
        self.runs: dict[str, list[int]] = {}

    def make(self, name: str, slow_attempts: int) -> Any:
        async def handle(payload: dict[str, Any], ctx: Context) -> dict[str, Any]:
            self.runs.setdefault(f"{name}:{payload['n']}", []).append(ctx.attempt)
            if ctx.attempt <= slow_attempts:
                await ctx.progress(0.1, "working")
                await asyncio.sleep(5)
            return {"n": payload["n"], "attempt": ctx.attempt}

        return handle


def test_a_cut_run_is_retried_only_when_idempotent_and_the_same_payload_runs_once(
        namespace: str, stream_app: StreamApp) -> None:
    run = uuid.uuid4().hex[:6]
    once, again, dedupe = f"mr{run}.once", f"mr{run}.again", f"mr{run}.dedupe"
    counted = Counted()
    agent = Agent(f"agent://mr/{run}", max_concurrency=4, ttl_ms=3000, execution_timeout_ms=600, lease_margin_ms=500)
    agent.capability(once, version="1.0.0")(counted.make("once", slow_attempts=9))
    agent.capability(again, version="1.0.0", idempotent=True)(counted.make("again", slow_attempts=1))
    agent.capability(dedupe, version="1.0.0", idempotent=True)(counted.make("dedupe", slow_attempts=0))
    receipts = Receipts(Names(namespace).receipts)
    with running(agent), Client() as client:
        registered(namespace, agent)
        wait_for(lambda: any(f"{dedupe}@1.0.0" in a["capabilities"] for a in stream_app.get("/agents")), 60,
                 "the router seeing the instance")
        before = now_ms()
        maybe = client.send(once, {"n": 1}, max_attempts=3)
        retried = client.send(again, {"n": 1}, max_attempts=3)

        failed = ending(receipts, maybe, Status.FAILED)
        done = ending(receipts, retried, Status.COMPLETED)

        first = client.send(dedupe, {"n": 7, "k": "v"})
        ran = ending(receipts, first, Status.COMPLETED)
        second = client.send(dedupe, {"k": "v", "n": 7})  # the same JSON, spelled in another key order
        reused = ending(receipts, second, Status.COMPLETED)

    # (a) not idempotent: FAILED MAYBE_RAN with the attempt's evidence, ran once, never retried
    assert failed.error and failed.error.code == "MAYBE_RAN" and failed.instance_id == agent.instance_id
    assert failed.error.message.startswith("EXECUTION_TIMEOUT")
    assert "does not declare idempotent" in failed.error.message
    assert before <= failed.timings["maybe_ran_started_at"] <= failed.at
    assert failed.timings["maybe_ran_run_ms"] >= 600 and failed.timings["maybe_ran_started_receipt"] == 1
    assert failed.timings["maybe_ran_progress"] >= 1
    assert counted.runs["once:1"] == [1], "the handler ran once"
    assert not {Status.ATTEMPT_FAILED, Status.RETRY_SCHEDULED} & set(statuses(receipts.by_message()[maybe]))
    # (b) idempotent: the cut attempt is retried and the retry completes
    assert counted.runs["again:1"] == [1, 2] and done.attempt == 2
    cut = [r for r in receipts.by_message()[retried] if r.status is Status.ATTEMPT_FAILED]
    assert cut and cut[0].error and cut[0].error.code == "EXECUTION_TIMEOUT"
    assert Status.RETRY_SCHEDULED in statuses(receipts.by_message()[retried])
    # (c) the same payload, no key, idempotent: run once, the second reuses the first's result
    assert counted.runs["dedupe:7"] == [1]
    assert ran.reused_from is None and reused.reused_from == first and reused.result == ran.result
