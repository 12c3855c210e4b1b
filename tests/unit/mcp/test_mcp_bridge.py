"""`reach mcp bridge`'s pure parts: tool names to capability names, schemas to contracts (invalid ones skipped),
tool results to outcomes; and the handlers over a session that fails (reach.mcp.bridge)."""

from __future__ import annotations

import asyncio
from concurrent.futures import Future
from typing import Any

import mcp_types as types
import pytest

from reach.agent import BusinessError, TransientError
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


def test_a_broken_server_is_a_transient_failure_and_no_usable_tool_is_an_error() -> None:
    session = BrokenSession()
    agent = bridge_agent(session, [tool("add")], agent_id="agent://mcp/calc", prefix="calc", version="1.0.0")
    spec = agent.capabilities["calc.add"]
    with pytest.raises(TransientError) as retried:
        asyncio.run(spec.handler({"a": 1}))
    assert retried.value.code == "MCP_UNAVAILABLE" and "went away" in str(retried.value)
    with pytest.raises(BridgeError, match="none can be served"):
        bridge_agent(session, [tool("???")], agent_id="agent://mcp/calc", prefix="calc", version="1.0.0")
    closed = ToolSession(lambda: None)  # type: ignore[arg-type,return-value]
    with pytest.raises(TransientError):
        closed.call("add", {}).result(1)
