"""The SDK's pipelined publishers on the in-memory request path: `Client.send_many` reports each envelope's own
outcome, `AsyncClient` sends and invokes end to end (the real router, fold and agent runner)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from reach.agent import Agent, Context
from reach.agent.signals import BusinessError
from reach.aioclient import AsyncClient
from reach.client import Client, Request, SendRefused
from reach.errors import ReachError
from reach.invoke import InvokeFailed
from reach.kafka import clients, codec
from reach.records import Envelope, Status
from tests.unit.e2e.memory_stack import MemoryStack

CAPABILITY = "e2e.echo"


def _echo() -> Agent:
    agent = Agent("agent://e2e/echo", max_concurrency=4)

    @agent.capability(CAPABILITY, version="1.0.0", input_schema={"type": "object"}, output_schema={"type": "object"})
    async def echo(payload: dict[str, Any], ctx: Context) -> dict[str, Any]:
        if payload.get("fail"):
            raise BusinessError("asked to fail")
        return {"echo": payload}

    return agent


def _on_topic(stack: MemoryStack, capability: str) -> dict[str, Envelope]:
    logs = stack._bus().topics[stack.names.capability(capability)].partitions  # noqa: SLF001 - the bus's records
    found = (codec.decode(record.value, Envelope) for log in logs for record in log if record.value)
    return {e.message_id: e for e in found}


def test_send_many_reports_the_one_envelope_the_bus_refused(stack: MemoryStack) -> None:
    with Client() as client:
        client.send("e2e.gone", {"warm": True})  # its topic exists now (and the client knows it)
        clients.admin(stack.kafka).delete_topics([stack.names.capability("e2e.gone")])
        sent = client.send_many([Request(CAPABILITY, {"i": 0}), (CAPABILITY, {"i": 1}),
                                 Request("e2e.gone", {"i": 2}), Request(CAPABILITY, {"i": 3}, {"session_key": "s"})])
    assert [s.ok for s in sent] == [True, True, False, True]
    refused = sent[2].error
    assert isinstance(refused, SendRefused) and refused.message_id == sent[2].message_id
    assert refused.code == "UNKNOWN_TOPIC_OR_PART" and "reach topics apply" in str(refused)
    written = _on_topic(stack, CAPABILITY)
    assert {s.message_id for s in sent if s.ok} <= set(written)
    assert [written[sent[i].message_id].payload for i in (0, 1, 3)] == [b'{"i":0}', b'{"i":1}', b'{"i":3}']
    assert written[sent[3].message_id].routing.session_key == "s"


def test_a_request_that_cannot_be_built_sends_nothing(stack: MemoryStack) -> None:
    with Client() as client, pytest.raises(ReachError, match="Capability 'Not A Capability' is invalid"):
        client.send_many([(CAPABILITY, {"i": 0}), ("Not A Capability", {})])
    topic = stack.names.capability(CAPABILITY)
    assert topic not in stack._bus().topics or not _on_topic(stack, CAPABILITY), "nothing was sent"  # noqa: SLF001


def test_async_client_sends_and_invokes(stack: MemoryStack) -> None:
    stack.run_agent(_echo())

    async def main() -> None:
        async with AsyncClient() as client:
            ids = await asyncio.gather(*(client.send("e2e.sink", {"n": n}) for n in range(50)))
            assert set(ids) <= set(_on_topic(stack, "e2e.sink")), "each send returned once its record was written"
            results = await asyncio.gather(*(client.invoke(CAPABILITY, {"n": n}, timeout_ms=8_000)
                                             for n in range(5)))
            assert results == [{"echo": {"n": n}} for n in range(5)]
            receipt = await client.invoke_receipt(CAPABILITY, {"fail": True}, timeout_ms=8_000)
            assert receipt.status is Status.FAILED
            with pytest.raises(InvokeFailed, match="asked to fail"):
                await client.invoke(CAPABILITY, {"fail": True}, timeout_ms=8_000)

    asyncio.run(main())
