"""`reach mcp bridge`'s pure parts: tool names to capability names, schemas to contracts (invalid ones skipped),
tool results to outcomes; and the handlers over a session that fails (reach.mcp.bridge)."""

from __future__ import annotations

import asyncio
from concurrent.futures import Future
from typing import Any

import mcp_types as types
import pytest

from reach.agent import BusinessError, TransientError
from reach.agent.agent import Context
from reach.agent.outcomes import Outcome
from reach.envelopes import new_envelope
from reach.mcp.bridge import BridgeError, ToolSession, bridge_agent, capability_name, outcome, plan


def tool(name: str, schema: dict[str, Any] | None = None, output: dict[str, Any] | None = None,
         description: str | None = None) -> types.Tool:
    return types.Tool(name=name, input_schema=schema or {"type": "object"}, output_schema=output,
                      description=description)


@pytest.mark.parametrize(("name", "expected"), [
    ("add", "calc.add"), ("getWeather", "calc.get-weather"), ("read_file", "calc.read-file"),
    ("HTTPGet", "calc.httpget"), ("--", None), ("é", None),
])
def test_tool_names_become_capability_names(name: str, expected: str | None) -> None:
    assert capability_name("calc", name) == expected


def test_a_tool_with_an_invalid_schema_is_skipped_with_the_reason() -> None:
    served, skipped = plan("calc", [
        tool("add", {"type": "object", "properties": {"a": {"type": "integer"}}}, description="Add."),
        tool("broken", {"type": "object", "properties": {"a": {"type": 12}}}),
        tool("read_file"), tool("read-file"), tool("???"),
    ])
    assert [b.capability for b in served] == ["calc.add", "calc.read-file"]
    assert served[0].input_schema["description"] == "Add."  # shown by `reach mcp` and the console
    assert len(skipped) == 3
    assert "tool 'broken' input schema: invalid JSON Schema at properties/a/type" in skipped[0]
    assert "already 'read_file'" in skipped[1] and "'???'" in skipped[2]


def test_results_structured_text_json_and_tool_errors() -> None:
    assert outcome("t", types.CallToolResult(content=[], structured_content={"result": 5})) == {"result": 5}
    assert outcome("t", types.CallToolResult(content=[types.TextContent(text='{"a": 1}')])) == {"a": 1}
    assert outcome("t", types.CallToolResult(content=[types.TextContent(text="plain")])) == "plain"
    with pytest.raises(BusinessError) as failed:
        outcome("divide", types.CallToolResult(content=[types.TextContent(text="cannot divide by zero")],
                                               is_error=True))
    assert failed.value.code == "TOOL_ERROR" and "'divide': cannot divide by zero" in str(failed.value)


class BrokenSession(ToolSession):
    def __init__(self) -> None:
        super().__init__(lambda: None)  # type: ignore[arg-type,return-value]  # never started

    def call(self, tool: str, arguments: Any) -> Future[types.CallToolResult]:
        failed: Future[types.CallToolResult] = Future()
        failed.set_exception(ConnectionResetError("the server went away"))
        return failed


def context() -> Context:
    env = new_envelope("calc.add", {"a": 1})
    return Context(envelope=env, agent_id="agent://mcp/calc", instance_id="i1")


class ClaimingSession(ToolSession):
    """A server whose tool result claims a huge usage."""

    def __init__(self) -> None:
        super().__init__(lambda: None)  # type: ignore[arg-type,return-value]  # never started

    def call(self, tool: str, arguments: Any) -> Future[types.CallToolResult]:
        done: Future[types.CallToolResult] = Future()
        done.set_result(types.CallToolResult(content=[], structured_content={
            "sum": 3, "usage": {"input_tokens": 90_000_000, "cost": 10**12}}))
        return done


def test_a_bridged_tools_usage_claim_stays_in_the_result_and_is_never_charged() -> None:
    """Issue 37, finding 7: a bridged MCP server's `{"usage": {"cost": 1e12}}` was charged to the caller."""
    from tests.unit.agent.test_ctx_usage import final

    agent = bridge_agent(ClaimingSession(), [tool("add")], agent_id="agent://mcp/calc", prefix="calc",
                         version="1.0.0")
    outcome, used = final(agent.capabilities["calc.add"].handler)
    assert outcome is Outcome.COMPLETE and used is None


def test_a_broken_server_is_a_transient_failure_and_no_usable_tool_is_an_error() -> None:
    session = BrokenSession()
    agent = bridge_agent(session, [tool("add")], agent_id="agent://mcp/calc", prefix="calc", version="1.0.0")
    spec = agent.capabilities["calc.add"]
    with pytest.raises(TransientError) as retried:
        asyncio.run(spec.handler({"a": 1}, context()))
    assert retried.value.code == "MCP_UNAVAILABLE" and "went away" in str(retried.value)
    with pytest.raises(BridgeError, match="none can be served"):
        bridge_agent(session, [tool("???")], agent_id="agent://mcp/calc", prefix="calc", version="1.0.0")
    closed = ToolSession(lambda: None)  # type: ignore[arg-type,return-value]
    with pytest.raises(TransientError):
        closed.call("add", {}).result(1)


def test_a_streamable_http_server_lists_and_answers_on_loopback() -> None:
    import socket
    import threading
    import time

    import uvicorn
    from mcp.server.mcpserver import MCPServer

    from reach.mcp.bridge import http_transport

    server = MCPServer("calc")

    @server.tool()
    def add(a: int, b: int) -> int:
        return a + b

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    web = uvicorn.Server(uvicorn.Config(server.streamable_http_app(), host="127.0.0.1", port=port,
                                        log_level="warning"))
    thread = threading.Thread(target=web.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 20
    while not web.started and time.monotonic() < deadline:
        time.sleep(0.05)
    session = ToolSession(http_transport(f"http://127.0.0.1:{port}/mcp", "Bearer not-checked-here"))
    try:
        assert [t.name for t in session.start(20)] == ["add"]
        assert outcome("add", session.call("add", {"a": 1, "b": 2}).result(20)) == {"result": 3}
    finally:
        session.close()
        web.should_exit = True
        thread.join(20)


def test_a_command_that_is_no_mcp_server_is_a_clear_error() -> None:
    import sys

    from reach.mcp.bridge import stdio_transport

    with pytest.raises(BridgeError, match="could not be started or listed"):
        ToolSession(stdio_transport(f"{sys.executable} -c pass")).start(20)
    with pytest.raises(BridgeError, match="--command is empty"):
        stdio_transport("  ")


def test_a_tool_name_longer_than_the_products_names_allow_is_skipped_with_a_short_reason() -> None:
    """Security finding (bridged MCP tool names had no length cap): a capability name the topics cannot hold, or a
    megabyte tool name, is skipped before any work is done on it, and the log line stays short."""
    from reach.mcp.bridge import MAX_CAPABILITY, MAX_TOOL_NAME

    longest = "a" * MAX_TOOL_NAME
    served, skipped = plan("calc", [tool(longest), tool("b" * (MAX_TOOL_NAME + 1)), tool("c" * 1_000_000)])
    assert [b.capability for b in served] == [f"calc.{longest}"]
    assert len(skipped) == 2 and all(len(why) < 400 and "at most" in why for why in skipped)
    prefix = "p" * (MAX_CAPABILITY - 10)
    assert capability_name(prefix, "a" * 9) == f"{prefix}.{'a' * 9}"
    assert capability_name(prefix, "a" * 10) is None, "a prefix and a tool that add up past the limit"


def test_the_tool_list_is_read_for_at_most_max_pages_and_max_tools() -> None:
    """Security finding (no pagination cap): a server whose tools/list pages forever, or lists without end, cannot
    hold the bridge's start or its memory."""
    from reach.mcp.bridge import list_tools

    pages: list[str | None] = []

    async def forever(cursor: str | None) -> types.ListToolsResult:
        pages.append(cursor)
        return types.ListToolsResult(tools=[tool(f"t{len(pages)}")], next_cursor="again")

    listed = asyncio.run(list_tools(forever, max_pages=5, max_tools=100))
    assert [t.name for t in listed] == ["t1", "t2", "t3", "t4", "t5"] and len(pages) == 5

    async def wide(cursor: str | None) -> types.ListToolsResult:
        return types.ListToolsResult(tools=[tool(f"w{i}") for i in range(50)], next_cursor=None if cursor else "2")

    assert len(asyncio.run(list_tools(wide, max_pages=5, max_tools=70))) == 70
    assert len(asyncio.run(list_tools(wide))) == 100, "within the caps, every page is read"


CALC = """
from mcp.server.mcpserver import MCPServer

server = MCPServer("calc")


@server.tool()
def add(a: int, b: int) -> int:
    return a + b


server.run("stdio")
"""

OLD_CALC = """
import json, sys

for line in sys.stdin:  # a server of the handshake era, by hand: it knows no server/discover
    msg = json.loads(line)
    if "id" not in msg:
        continue
    method, args = msg["method"], msg.get("params", {}).get("arguments", {})
    if method == "initialize":
        result = {"protocolVersion": "2025-06-18", "capabilities": {"tools": {}},
                  "serverInfo": {"name": "old-calc", "version": "1"}}
    elif method == "tools/list":
        result = {"tools": [{"name": "add", "inputSchema": {"type": "object"}}]}
    elif method == "tools/call":
        total = args.get("a", 0) + args.get("b", 0)
        result = {"content": [{"type": "text", "text": str(total)}], "structuredContent": {"result": total}}
    else:
        print(json.dumps({"jsonrpc": "2.0", "id": msg["id"], "error": {"code": -32601, "message": "Method not found"}}),
              flush=True)
        continue
    print(json.dumps({"jsonrpc": "2.0", "id": msg["id"], "result": result}), flush=True)
"""


@pytest.mark.parametrize(("code", "revision"), [(CALC, "2026-07-28"), (OLD_CALC, "2025-06-18")])
def test_the_bridge_speaks_the_servers_revision(code: str, revision: str, tmp_path: Any) -> None:
    """The bridge's session is the SDK's Client: server/discover with a 2026-07-28 server, the handshake with one that
    does not serve it (the previous revision keeps working); it lists and calls the tools either way."""
    import sys

    from reach.mcp.bridge import stdio_transport

    script = tmp_path / "calc.py"
    script.write_text(code)
    session = ToolSession(stdio_transport(f"{sys.executable} {script}"))
    try:
        assert [t.name for t in session.start(30)] == ["add"]
        assert session.protocol_version == revision
        assert outcome("add", session.call("add", {"a": 2, "b": 3}).result(20)) == {"result": 5}
    finally:
        session.close()
