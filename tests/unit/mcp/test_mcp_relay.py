"""`reach mcp stdio`'s relay over an in-memory upstream session (reach.mcp.relay)."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any

import mcp_types as types

from reach.mcp.relay import Relay
from tests.unit.mcp.fakes import FakeConnection, context


@dataclass
class FakeUpstream:
    fail: bool = False
    calls: list[tuple[str, Any, Any]] = field(default_factory=list)

    async def list_tools(self, *, params: Any = None) -> types.ListToolsResult:
        return types.ListToolsResult(tools=[types.Tool(name="demo.echo", input_schema={"type": "object"})])

    async def call_tool(self, name: str, arguments: Any = None, *, meta: Any = None) -> types.CallToolResult:
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
