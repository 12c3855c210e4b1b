"""Progress and partial results end to end (issue 26): the writer agent's chunks through `Client.stream`,
`reach send --wait --follow` and the gateway's SSE; a chatty handler stays within the receipt rate and the
status row's bound."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest

from examples.writer_agent import agent as writer_agent
from examples.writer_agent import parts
from reach.agent import Agent, Context
from reach.client import Client
from reach.core.progress import MAX_ROW_CHUNK_CHARS, MAX_ROW_CHUNKS
from reach.invoke import StreamChunk, StreamProgress, StreamResult
from reach.names import Names
from reach.records import Status
from tests.integration.agent_support import Receipts, reach_cli, running, wait_for
from tests.integration.gateway_fixtures import gateway
from tests.integration.stream_app import StreamApp
from tests.integration.test_gateway_http import Gateway, sse_events

pytestmark = pytest.mark.integration
__all__ = ["gateway"]


def ready(client: Client, capability: str, payload: Any) -> None:
    """Wait until the router routes to the capability (an invoke completes)."""
    def answered() -> bool:
        try:
            client.invoke(capability, payload, timeout_ms=5_000)
            return True
        except Exception:  # noqa: BLE001 - not routable yet
            return False

    wait_for(answered, 60, f"{capability} served", interval=0.5)


def test_the_writers_chunks_reach_the_client_the_cli_and_sse_in_order(namespace: str, gateway: Gateway) -> None:
    expected = parts("Kafka")
    with running(writer_agent), Client() as client:
        ready(client, "demo.write", {"topic": "warm-up"})
        items = list(client.stream("demo.write", {"topic": "Kafka"}, timeout_ms=30_000))
        chunks = [i for i in items if isinstance(i, StreamChunk)]
        assert [c.data for c in chunks] == expected and [c.seq for c in chunks] == list(range(5))
        assert isinstance(items[-1], StreamResult) and items[-1].value == {"text": "".join(expected)}
        assert [i for i in items if isinstance(i, StreamProgress)][-1].fraction == 1.0

        out = reach_cli("send", "demo.write", "--payload", '{"topic": "Kafka"}', "--wait", "--follow")
        assert out.returncode == 0, out.stderr
        assert out.stdout.startswith("".join(expected) + "\n") and "COMPLETED" in out.stdout
        assert "progress 100% 5 of 5" in out.stderr

        accepted = gateway.post("/v1/envelopes", {"capability": "demo.write", "payload": {"topic": "Kafka"}})
        assert accepted.status_code == 202, accepted.text
        events = sse_events(gateway, accepted.json()["message_id"])
        assert [e["data"] for kind, e in events if kind == "chunk"] == expected
        assert events[-1][0] == "terminal" and events[-1][1]["status"] == "COMPLETED"
        last_chunk = max(i for i, (kind, _) in enumerate(events) if kind == "chunk")
        assert last_chunk < len(events) - 1  # every chunk before the ending


def chatty_agent() -> Agent:
    agent = Agent("agent://test/chatty", region="local", max_concurrency=2)

    @agent.capability("test.chatty", version="1.0.0", input_schema={"type": "object"})
    async def chatty(_payload: dict[str, Any], ctx: Context) -> dict[str, Any]:
        for i in range(10_000):
            await ctx.emit(f"token {i:05d} of ten thousand;")  # 28 chars: 280 KB in all, over the row's bound
            if i % 50 == 0:
                await asyncio.sleep(0.01)  # spread over ~2 s, so the interval, not the loop, sets the rate
        return {"emitted": 10_000}

    return agent


def test_a_chatty_handler_is_held_to_the_receipt_rate_and_the_row_to_its_bound(namespace: str,
                                                                                stream_app: StreamApp) -> None:
    receipts = Receipts(Names(namespace).receipts)
    with running(chatty_agent()), Client() as client:
        ready(client, "test.chatty", {"warm": True})
        began = time.monotonic()
        items = list(client.stream("test.chatty", {}, timeout_ms=60_000))
        took = time.monotonic() - began
        result = items[-1]
        assert isinstance(result, StreamResult) and result.value == {"emitted": 10_000}
        mid = result.receipt.message_id
        seen = receipts.wait_status([mid], Status.COMPLETED)[mid]
        progress = [r for r in seen if r.status is Status.PROGRESS]
        span_s = (progress[-1].at - progress[0].at) / 1000
        assert len(progress) <= span_s * 10 + 2, (len(progress), span_s)  # at most one per 100 ms
        assert span_s >= 1.0 and took >= span_s
        text = "".join(c.data for r in progress for c in (r.progress.chunks if r.progress else []))
        assert text == "".join(f"token {i:05d} of ten thousand;" for i in range(10_000))  # nothing lost

        row = stream_app.get(f"/messages/{mid}")
        assert row["status"] == "COMPLETED"
        kept = row["progress"]["chunks"]
        assert len(kept) <= MAX_ROW_CHUNKS and sum(len(c["data"]) for c in kept) <= MAX_ROW_CHUNK_CHARS
        assert row["progress"]["dropped"] > 0 and kept[-1]["data"].endswith("token 09999 of ten thousand;")
