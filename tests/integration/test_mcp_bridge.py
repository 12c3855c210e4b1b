"""`reach mcp bridge` on the real broker and Redis: a small MCP server written here (the `mcp` SDK's MCPServer,
FastMCP's name in mcp 2, over stdio) runs as an agent instance, and its tools are capabilities `reach send --wait`
calls: a result COMPLETED, a tool error FAILED TOOL_ERROR with the tool's reason, a contract violation REJECTED."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from reach.envelopes import now_ms
from tests.integration.router_helpers import running_router, running_status, wait_for

pytestmark = pytest.mark.integration
ROOT = Path(__file__).resolve().parents[2]

SERVER = '''
from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError

server = MCPServer("calc")


@server.tool()
def add(a: int, b: int) -> int:
    """Add two whole numbers."""
    return a + b


@server.tool()
def divide(a: float, b: float) -> float:
    """Divide a by b."""
    if b == 0:
        raise ToolError("cannot divide by zero")
    return a / b


server.run("stdio")
'''


@pytest.fixture
def bridge(namespace: str, tmp_path: Path) -> Iterator[subprocess.Popen[str]]:
    server = tmp_path / "calc_server.py"
    server.write_text(SERVER)
    proc = subprocess.Popen([sys.executable, "-m", "reach", "mcp", "bridge", "--command",
                             f"{sys.executable} {server}", "--prefix", "calc"],
                            cwd=ROOT, env=dict(os.environ), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            text=True)
    yield proc
    proc.terminate()
    try:
        proc.wait(60)
    except subprocess.TimeoutExpired:
        proc.kill()


def send(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "reach", "send", *args, "--wait", "--json", "--timeout", "20"],
                          cwd=ROOT, capture_output=True, text=True, timeout=60, env=dict(os.environ))


def test_an_mcp_servers_tools_are_capabilities_through_reach_send(bridge: subprocess.Popen[str],
                                                                  tmp_path: Path) -> None:
    with running_status(tmp_path), running_router() as router:
        def serving() -> bool:
            if bridge.poll() is not None:
                raise AssertionError(f"the bridge exited {bridge.returncode}: {bridge.stderr.read()[-2000:]}")  # type: ignore[union-attr]
            live = {c.name: c for r in router.state.live(now_ms()) for c in r.capabilities}
            return {"calc.add", "calc.divide"} <= set(live)

        wait_for(serving, 60, "the bridged tools as live capabilities")
        caps = {c.name: c for r in router.state.live(now_ms()) for c in r.capabilities}
        assert json.loads(caps["calc.add"].input_schema)["required"] == ["a", "b"]  # the tool's schema is the contract

        done = send("calc.add", "--payload", '{"a": 2, "b": 3}')
        assert done.returncode == 0, done.stdout + done.stderr
        receipt: dict[str, Any] = json.loads(done.stdout)
        assert receipt["status"] == "COMPLETED" and receipt["result"] == {"result": 5}
        assert receipt["agent_id"] == "agent://mcp/calc"

        failed = send("calc.divide", "--payload", '{"a": 1, "b": 0}')
        assert failed.returncode == 1
        error = json.loads(failed.stdout)
        assert error["status"] == "FAILED" and error["error"]["code"] == "TOOL_ERROR"
        assert "cannot divide by zero" in error["error"]["message"]

        bad = send("calc.add", "--payload", '{"a": "two"}')
        assert bad.returncode == 1 and json.loads(bad.stdout)["status"] == "REJECTED"
