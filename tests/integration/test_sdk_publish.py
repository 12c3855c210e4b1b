"""The SDK's pipelined publishers against the real broker: `send_many` checks every acknowledgement and reports
exactly the record the broker refused; `AsyncClient` sends and invokes end to end through the router and an agent."""

from __future__ import annotations

import asyncio
import os
import time
from pathlib import Path
from typing import Any

import pytest
from aiokafka.partitioner import murmur2  # Java's murmur2: where librdkafka's murmur2_random puts a key

from reach.agent import Agent
from reach.aioclient import AsyncClient
from reach.client import Client, Request, SendRefused
from reach.envelopes import now_ms
from reach.invoke import InvokeUnroutable
from reach.kafka import clients, codec, topicreader, topics, types
from reach.names import Names
from reach.records import Envelope
from reach.settings import KafkaSettings, ReachSettings
from tests.integration.agent_support import running
from tests.integration.router_helpers import running_router, running_status, wait_for

pytestmark = pytest.mark.integration


def serving(router: Any, capability: str) -> bool:
    return any(c.name == capability for r in router.state.live(now_ms()) for c in r.capabilities)


def _written(topic: str) -> dict[str, Envelope]:
    """Every envelope on `topic`, by message_id, read from the start."""
    found: dict[str, Envelope] = {}
    reader = topicreader.open_reader("sdk-publish-test", KafkaSettings())
    try:
        parts = topicreader.partitions(reader, topic)
        ends = {p: end for p in parts if (end := topicreader.watermarks(reader, topic, p)[1]) > 0}
        clients.assign(reader, topic, dict.fromkeys(parts, types.OFFSET_BEGINNING))
        deadline = time.monotonic() + 30
        while any(clients.positions(reader, topic, ends)[p] < end for p, end in ends.items()):
            assert time.monotonic() < deadline, f"{topic} not read to its end within 30 s"
            for msg in clients.take(reader, 500, 1.0):
                if not msg.error() and msg.value():
                    envelope = codec.decode(msg.value(), Envelope)
                    found[envelope.message_id] = envelope
    finally:
        reader.close()
    return found


def test_send_many_reports_exactly_the_envelope_the_broker_refused(namespace: str) -> None:
    names = Names(namespace)
    small = names.capability("test.small")
    admin = clients.admin(KafkaSettings())
    family = topics.load(ReachSettings().topics_file).family("cap")
    # the broker refuses any batch over 2 KiB on this capability's topic: the big envelope is alone there
    topics.ensure_topic(admin, small, family.model_copy(update={"configs": {**family.configs,
                                                                            "max.message.bytes": "2048"}}))
    big = os.urandom(8_192)  # incompressible: lz4 cannot bring it under the topic's limit
    # the broker refuses a whole batch: the neighbour on the small topic goes to another partition than the big one
    def part(key: str) -> int:
        return (murmur2(key.encode()) & 0x7FFFFFFF) % family.partitions

    neighbour = next(k for k in (f"n{i}" for i in range(100)) if part(k) != part("big"))
    with Client() as client:
        sent = client.send_many([Request("test.fine", {"i": 0}), Request("test.fine", {"i": 1}),
                                 Request("test.small", big, {"session_key": "big"}), Request("test.fine", {"i": 2}),
                                 Request("test.small", {"i": 3}, {"session_key": neighbour})])
        assert client.send("test.fine", {"i": 4})  # the sync send, unchanged: it returned once acknowledged
    assert [s.ok for s in sent] == [True, True, False, True, True]
    refused = sent[2].error
    assert isinstance(refused, SendRefused) and refused.code == "MSG_SIZE_TOO_LARGE" and refused.topic == small
    assert refused.message_id == sent[2].message_id and "was not sent" in str(refused)
    on_fine, on_small = _written(names.capability("test.fine")), _written(small)
    assert {sent[i].message_id for i in (0, 1, 3)} <= set(on_fine)
    assert set(on_small) == {sent[4].message_id}, "the refused envelope was not written, its neighbour was"


def test_async_client_sends_and_invokes_through_the_router(namespace: str, tmp_path: Path) -> None:
    agent = Agent("agent://demo/echo", region="local", max_concurrency=8)

    @agent.capability("demo.echo", version="1.0.0", input_schema={"type": "object"})
    async def echo(payload: dict[str, Any]) -> dict[str, Any]:
        return payload

    async def main() -> None:
        async with AsyncClient() as client:
            ids = await asyncio.gather(*(client.send("test.sink", {"n": n}) for n in range(200)))
            assert set(ids) <= set(await asyncio.to_thread(_written, Names(namespace).capability("test.sink")))
            results = await asyncio.gather(*(client.invoke("demo.echo", {"n": n}, timeout_ms=20_000)
                                             for n in range(10)))
            assert results == [{"n": n} for n in range(10)]
            with pytest.raises(InvokeUnroutable):
                await client.invoke("nobody.serves", {}, timeout_ms=20_000)

    with running_status(tmp_path), running_router() as router, running(agent):
        wait_for(lambda: serving(router, "demo.echo"), what="echo agent READY")
        asyncio.run(main())
