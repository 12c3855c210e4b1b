"""`reach mcp stdio`'s relay over an in-memory upstream session (reach.mcp.relay)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import httpx2
import mcp_types as types
import pytest

from reach.bodylimit import PEER_ANSWER_BYTES, AnswerTooLarge
from reach.mcp.relay import Relay, http_client
from tests.unit.mcp.fakes import FakeConnection, context


@dataclass
class FakeUpstream:
    fail: bool = False
    calls: list[tuple[str, Any, Any]] = field(default_factory=list)

    async def list_tools(self, *, params: Any = None) -> types.ListToolsResult:
        return types.ListToolsResult(tools=[types.Tool(name="demo.echo", input_schema={"type": "object"})])

    async def call_tool(self, name: str, arguments: Any = None, *, meta: Any = None, **_rounds: Any) -> Any:
        if self.fail:
            raise RuntimeError("HTTP 401 from the gateway")
        self.calls.append((name, arguments, meta))
        return types.CallToolResult(content=[], structured_content=arguments)


def test_the_relay_forwards_lists_calls_and_list_changes() -> None:
    upstream = FakeUpstream()
    relay = Relay(upstream)  # type: ignore[arg-type]
    connection = FakeConnection()
    ctx = context(connection)

    async def scenario() -> None:
        await relay.on_upstream(types.ToolListChangedNotification())  # before any list: nobody to tell
        listed = await relay.list_tools(ctx, None)
        assert [t.name for t in listed.tools] == ["demo.echo"]
        called = await relay.call_tool(ctx, types.CallToolRequestParams(name="demo.echo", arguments={"a": 1},
                                                                        _meta={"agent-reach/idempotency_key": "k"}))
        assert called.structured_content == {"a": 1}
        await relay.on_upstream(types.ToolListChangedNotification())

    asyncio.run(scenario())
    assert upstream.calls == [("demo.echo", {"a": 1}, {"agent-reach/idempotency_key": "k"})]
    assert connection.outbound.sent == ["notifications/tools/list_changed"]


def test_an_upstream_failure_is_a_tool_error() -> None:
    relay = Relay(FakeUpstream(fail=True))  # type: ignore[arg-type]
    ctx = context(FakeConnection())
    result = asyncio.run(relay.call_tool(ctx, types.CallToolRequestParams(name="demo.echo", arguments={})))
    assert result.is_error is True
    block = result.content[0]
    assert isinstance(block, types.TextContent) and block.text == "relay_error: HTTP 401 from the gateway"


def test_the_relay_reads_the_gateways_answer_up_to_the_peer_limit() -> None:
    """Second review, finding 4: `reach mcp stdio` read the gateway's answer whole, however big."""
    big = b"x" * (PEER_ANSWER_BYTES + 1)

    async def chunks(body: bytes) -> AsyncIterator[bytes]:  # streamed, as a server's answer is (no Content-Length)
        for start in range(0, len(body), 1 << 20):
            yield body[start:start + (1 << 20)]

    async def main() -> None:
        answers = httpx2.MockTransport(lambda request: httpx2.Response(
            200, content=chunks(big if request.url.path == "/big" else b"{}")))
        async with http_client("key.secret", "http://gw/mcp", transport=answers) as http:
            assert (await http.post("http://gw/small")).content == b"{}"
            with pytest.raises(AnswerTooLarge, match="answers are read up to"):
                await http.post("http://gw/big")

    asyncio.run(main())


def test_a_2026_assistant_hears_changes_on_its_listen_stream_and_gets_round_trips_and_tasks_as_they_are() -> None:
    """On 2026-07-28 the relay passes the gateway's InputRequiredResult and (to an assistant that declared Tasks) its
    task handle through unchanged; an upstream change is published on the relay's listen bus."""
    from reach.mcp import tasks

    required = types.InputRequiredResult(input_requests={}, request_state="reach-input:o:m1")
    handle = tasks.created("sealed", "working", 0, tasks.TaskSettings())

    class Answers(FakeUpstream):
        answers: list[Any] = []

        async def call_tool(self, name: str, arguments: Any = None, *, meta: Any = None, **rounds: Any) -> Any:
            self.calls.append((name, arguments, rounds.get("request_state")))
            return self.answers.pop(0)

    upstream = Answers()
    upstream.answers = [required, handle]
    relay = Relay(upstream)  # type: ignore[arg-type]
    heard: list[Any] = []
    relay.bus.subscribe(heard.append)
    ctx = context(FakeConnection())
    ctx.protocol_version = "2026-07-28"
    ctx.session.client_capabilities = types.ClientCapabilities(extensions={tasks.EXTENSION: {}})

    async def scenario() -> None:
        assert await relay.call_tool(ctx, types.CallToolRequestParams(name="demo.x", arguments={})) is required
        assert await relay.call_tool(ctx, types.CallToolRequestParams(name="demo.x", arguments={})) is handle
        await relay.on_upstream(types.ToolListChangedNotification())

    asyncio.run(scenario())
    assert [type(e).__name__ for e in heard] == ["ToolsListChanged"]
