"""MCP end to end: the official `mcp` SDK client (ClientSession over streamable HTTP) against a real `reach gateway`
process, router, broker and Redis, with the example echo agent (examples/echo_agent.py) in its own process and a
few test capabilities in this one. One module-scoped set-up serves every test (CI time budget)."""

from __future__ import annotations

import asyncio
import contextlib
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from typing import Any

import anyio
import httpx
import httpx2
import mcp_types as types
import pytest
from cryptography.fernet import Fernet
from mcp import Client, ClientSession
from mcp.client.session import IncomingMessage
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError
from mcp.shared.subscriptions import ToolsListChanged

from reach.agent import Agent, BusinessError, Canceled
from reach.agent.agent import Context
from reach.mcp import tasks
from tests.integration.agent_support import running, wait_for
from tests.integration.conftest import Infra, fresh_namespace
from tests.integration.stream_app import ROOT, StreamApp
from tests.integration.test_a2a import stop_process
from tests.integration.test_gateway_http import Gateway, create_app

pytestmark = pytest.mark.integration

STARTED: dict[str, str] = {}  # demo.mcp.hold: the payload's n -> the message id of the run that started


def tools_agent() -> Agent:
    agent = Agent("agent://demo/mcp", region="local", max_concurrency=4, execution_timeout_ms=90_000)

    @agent.capability("demo.mcp.greet", version="1.0.0", input_schema={
        "type": "object", "properties": {"name": {"type": "string"}}, "required": ["name"]},
        output_schema={"type": "object", "properties": {"greeting": {"type": "string"}}})
    async def greet(payload: dict[str, Any]) -> dict[str, Any]:
        return {"greeting": f"hello {payload['name']}"}

    @agent.capability("demo.mcp.fail", version="1.0.0")
    async def fail(payload: dict[str, Any]) -> dict[str, Any]:
        raise BusinessError("OUT_OF_STOCK", "no more widgets")

    @agent.capability("demo.mcp.hold", version="1.0.0")
    async def hold(payload: dict[str, Any], ctx: Context) -> dict[str, Any]:
        STARTED[str(payload["n"])] = ctx.envelope.message_id
        give_up = time.monotonic() + 60
        while time.monotonic() < give_up:
            if ctx.cancelled:
                raise Canceled("stopped on request")
            await asyncio.sleep(0.05)
        return {"n": payload["n"]}

    return agent


def late_agent() -> Agent:
    agent = Agent("agent://demo/mcp-late", region="local")

    @agent.capability("demo.mcp.late", version="1.0.0")
    async def late(payload: dict[str, Any]) -> dict[str, Any]:
        return payload

    return agent


@dataclass
class Mesh:
    gateway: Gateway
    tokens: dict[str, str]

    @property
    def url(self) -> str:
        return self.gateway.url + "/mcp"


@pytest.fixture(scope="module")
def mesh(infra: Infra, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Mesh]:
    with pytest.MonkeyPatch.context() as patch, contextlib.ExitStack() as stack:
        stack.enter_context(contextlib.contextmanager(fresh_namespace)(infra, patch))
        patch.setenv("REACH_GATEWAY_SECRETS_KEY", Fernet.generate_key().decode())
        patch.setenv("REACH_GATEWAY_MCP_TASK_AFTER_MS", "1500")  # a call declaring Tasks is a task after 1.5 s
        logs = tmp_path_factory.mktemp("mcp")
        apps = {"shop": create_app("shop"), "narrow": create_app("narrow", "--capabilities", "demo.echo")}
        router = StreamApp(logs)
        patch.setenv("REACH_WEB_PORT", str(router.port))
        echo = subprocess.Popen([sys.executable, "-m", "reach", "agent", "run", "examples.echo_agent:agent"],
                                cwd=ROOT, stdout=subprocess.DEVNULL,
                                stderr=stack.enter_context(open(logs / "echo.log", "wb")))
        stack.callback(stop_process, echo)
        stack.enter_context(running(tools_agent()))
        router.start()
        stack.callback(router.stop)
        gateway = Gateway(logs, apps)
        stack.callback(gateway.stop)
        gateway.start()
        mesh = Mesh(gateway, {name: made['a2a_token'] for name, made in apps.items()})
        wanted = {"demo.echo", "demo.mcp.greet", "demo.mcp.fail", "demo.mcp.hold"}
        wait_for(lambda: wanted <= set(asyncio.run(tool_names(mesh, "shop"))), 60, "the tools", interval=0.5)
        yield mesh


@contextlib.asynccontextmanager
async def session(mesh: Mesh, token: str, notes: list[IncomingMessage] | None = None) -> AsyncIterator[ClientSession]:
    async def note(message: IncomingMessage) -> None:
        if notes is not None:
            notes.append(message)

    http = httpx2.AsyncClient(headers={"Authorization": f"Bearer {token}"}, timeout=httpx2.Timeout(30, read=120))
    async with http, streamable_http_client(mesh.url, http_client=http) as (read, write), \
            ClientSession(read, write, message_handler=note) as client:
        await client.initialize()
        yield client


async def tool_names(mesh: Mesh, app: str) -> list[str]:
    async with session(mesh, mesh.tokens[app]) as client:
        return [t.name for t in (await client.list_tools()).tools]


def test_lists_the_tools_and_calls_echo(mesh: Mesh) -> None:
    async def scenario() -> None:
        async with session(mesh, mesh.tokens["shop"]) as client:
            assert client.server_capabilities is not None and client.server_capabilities.tools is not None
            assert client.server_capabilities.tools.list_changed is True
            listed = {t.name: t for t in (await client.list_tools()).tools}
            assert listed["demo.echo"].input_schema == {"type": "object"}  # the example agent's contract
            assert listed["demo.mcp.greet"].input_schema["required"] == ["name"]
            assert listed["demo.mcp.greet"].output_schema == {"type": "object",
                                                              "properties": {"greeting": {"type": "string"}}}
            echoed = await client.call_tool("demo.echo", {"text": "hello", "n": 3})
            assert echoed.is_error is False, echoed
            assert echoed.structured_content == {"text": "hello", "n": 3}
            greeted = await client.call_tool("demo.mcp.greet", {"name": "ada"})
            assert greeted.structured_content == {"greeting": "hello ada"}

    asyncio.run(scenario())


def test_a_contract_violation_and_a_failure_are_tool_errors(mesh: Mesh) -> None:
    async def scenario() -> None:
        async with session(mesh, mesh.tokens["shop"]) as client:
            bad = await client.call_tool("demo.mcp.greet", {"name": 42})
            assert bad.is_error is True
            text = bad.content[0].text if isinstance(bad.content[0], types.TextContent) else ""
            assert text.startswith("invalid_payload:") and "name" in text, text
            failed = await client.call_tool("demo.mcp.fail", {})
            assert failed.is_error is True
            text = failed.content[0].text if isinstance(failed.content[0], types.TextContent) else ""
            assert text.startswith("failed:") and "OUT_OF_STOCK" in text and "no more widgets" in text, text
            missing = await client.call_tool("demo.nothing", {})
            assert missing.is_error is True

    asyncio.run(scenario())


def test_an_app_limited_to_echo_sees_and_calls_only_echo(mesh: Mesh) -> None:
    async def scenario() -> None:
        async with session(mesh, mesh.tokens["narrow"]) as client:
            assert [t.name for t in (await client.list_tools()).tools] == ["demo.echo"]
            refused = await client.call_tool("demo.mcp.greet", {"name": "ada"})
            assert refused.is_error is True
            assert (await client.call_tool("demo.echo", {"a": 1})).structured_content == {"a": 1}

    asyncio.run(scenario())


def test_an_unauthenticated_request_is_refused(mesh: Mesh) -> None:
    init = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}}
    accept = {"Accept": "application/json, text/event-stream"}
    anonymous = httpx.post(mesh.url, json=init, headers=accept, timeout=10)
    assert anonymous.status_code == 401 and anonymous.headers["www-authenticate"].startswith("Bearer")
    key_id = mesh.tokens["shop"].split(".")[0]
    wrong = httpx.post(mesh.url, json=init, headers={**accept, "Authorization": f"Bearer {key_id}.wrong"}, timeout=10)
    assert wrong.status_code == 401 and wrong.json()["error"] == "denied"

    async def scenario() -> None:
        with pytest.raises(Exception):  # noqa: B017 - the SDK surfaces the 401 as its transport's error
            with anyio.fail_after(30):
                async with session(mesh, f"{key_id}.wrong"):
                    pass

    asyncio.run(scenario())


def test_a_cancelled_call_cancels_the_message(mesh: Mesh) -> None:
    async def scenario() -> None:
        async with session(mesh, mesh.tokens["shop"]) as client:
            async with anyio.create_task_group() as group:
                group.start_soon(client.call_tool, "demo.mcp.hold", {"n": 1})
                with anyio.fail_after(30):
                    while "1" not in STARTED:
                        await anyio.sleep(0.05)
                group.cancel_scope.cancel()  # the SDK sends notifications/cancelled for the abandoned call

    asyncio.run(scenario())
    message_id = STARTED["1"]

    def ended() -> str | None:
        row = mesh.gateway.get(f"/v1/messages/{message_id}")
        status = row.json().get("status") if row.status_code == 200 else None
        return status if status in ("CANCELED", "COMPLETED", "FAILED") else None

    assert wait_for(ended, 30, "the held message's end", interval=0.2) == "CANCELED"


def test_a_new_agent_changes_the_tool_list(mesh: Mesh) -> None:
    notes: list[IncomingMessage] = []

    async def scenario() -> None:
        async with session(mesh, mesh.tokens["shop"], notes) as client:
            assert "demo.mcp.late" not in [t.name for t in (await client.list_tools()).tools]
            with running(late_agent()):
                with anyio.fail_after(60):
                    while not any(isinstance(n, types.ToolListChangedNotification) for n in notes):
                        await anyio.sleep(0.1)
                assert "demo.mcp.late" in [t.name for t in (await client.list_tools()).tools]

    asyncio.run(scenario())


# -- the 2026-07-28 revision, with the same official SDK's Client (it probes server/discover) --------------------

MODERN = "2026-07-28"


def later_agent() -> Agent:
    agent = Agent("agent://demo/mcp-later", region="local")

    @agent.capability("demo.mcp.later", version="1.0.0")
    async def later(payload: dict[str, Any]) -> dict[str, Any]:
        return payload

    return agent


@contextlib.asynccontextmanager
async def modern(mesh: Mesh, token: str, **options: Any) -> AsyncIterator[Client]:
    http = httpx2.AsyncClient(headers={"Authorization": f"Bearer {token}"}, timeout=httpx2.Timeout(30, read=120))
    async with http, Client(streamable_http_client(mesh.url, http_client=http), **options) as client:
        yield client


def test_the_2026_revision_lists_calls_and_hears_a_tool_list_change(mesh: Mesh) -> None:
    async def scenario() -> None:
        async with modern(mesh, mesh.tokens["shop"]) as client:
            assert client.protocol_version == MODERN
            tools_caps = client.server_capabilities.tools
            assert tools_caps is not None and tools_caps.list_changed is True, "subscriptions/listen is served"
            listed = await client.list_tools()
            assert {"demo.echo", "demo.mcp.greet"} <= {t.name for t in listed.tools}
            assert (listed.ttl_ms, listed.cache_scope) == (2000, "private"), "hints as often as the watch looks"
            echoed = await client.call_tool("demo.echo", {"text": "modern", "n": 1})
            assert echoed.is_error is False and echoed.structured_content == {"text": "modern", "n": 1}
            async with client.listen(tools_list_changed=True) as heard:
                with running(later_agent()):
                    with anyio.fail_after(90):
                        event = await heard.__anext__()
                    assert isinstance(event, ToolsListChanged)
                    assert "demo.mcp.later" in {t.name for t in (await client.list_tools()).tools}

    asyncio.run(scenario())


def test_the_2026_revision_refuses_headers_that_do_not_match_the_body(mesh: Mesh) -> None:
    """The spec's required `Mcp-Method` / `Mcp-Name` headers (basic/transports, 2026-07-28): a mismatch is the JSON-RPC
    error -32020 (HEADER_MISMATCH), checked before the call is dispatched; bad input, raw HTTP."""
    meta = {"io.modelcontextprotocol/protocolVersion": MODERN, "io.modelcontextprotocol/clientCapabilities": {}}
    call = {"jsonrpc": "2.0", "id": 7, "method": "tools/call",
            "params": {"name": "demo.echo", "arguments": {"text": "x"}, "_meta": meta}}
    base = {"Accept": "application/json, text/event-stream", "Authorization": f"Bearer {mesh.tokens['shop']}",
            "MCP-Protocol-Version": MODERN}
    for headers in ({"Mcp-Method": "tools/list", "Mcp-Name": "demo.echo"},  # another method than the body's
                    {"Mcp-Method": "tools/call", "Mcp-Name": "demo.mcp.greet"},  # another tool than the body's
                    {"Mcp-Method": "tools/call"}):  # the name missing
        answer = httpx.post(mesh.url, json=call, headers={**base, **headers}, timeout=10)
        assert answer.json()["error"]["code"] == -32020, (headers, answer.text)
    ok = httpx.post(mesh.url, json=call, headers={**base, "Mcp-Method": "tools/call", "Mcp-Name": "demo.echo"},
                    timeout=30)
    assert ok.status_code == 200 and "error" not in ok.text[:200], ok.text


def test_the_2026_revision_answers_a_question_through_the_multi_round_trip(mesh: Mesh) -> None:
    """INPUT_REQUIRED as an InputRequiredResult: the official Client hands the question to its elicitation callback and
    retries the call with the answer; the same message runs its next turn and the call returns its result."""
    from examples.interview_agent import agent as interview

    asked: list[str] = []

    async def answer(_context: Any, params: types.ElicitRequestParams) -> types.ElicitResult:
        asked.append(params.message)
        return types.ElicitResult(action="accept", content={"name": "Ada"})

    async def scenario() -> None:
        async with modern(mesh, mesh.tokens["shop"], elicitation_callback=answer) as client:
            result = await client.call_tool("demo.interview", {"greeting": "Hi"})
            assert result.is_error is False, result
            assert result.structured_content == {"greeting": "Hi, Ada!", "turns": 1}
            assert asked == ["What is your name?"]

    with running(interview):
        wait_for(lambda: "demo.interview" in asyncio.run(tool_names(mesh, "shop")), 60, "the interview tool",
                 interval=0.5)
        asyncio.run(scenario())


def test_the_2026_revision_makes_a_long_call_a_task_only_its_app_reads_and_cancels(mesh: Mesh) -> None:
    """The Tasks extension with the official Client (tasks.TasksClient declares it): demo.mcp.hold runs past the
    gateway's 1.5 s, so the call answers a task handle; tasks/get reads the running message as `working`; another
    app's tasks/get and tasks/cancel of that task id are "Task not found"; the owner's cancel (the client's
    tasks/cancel when the waiting call is cancelled) cancels the message: the handler sees it and the task reads
    `cancelled`."""
    ids: list[str] = []

    async def get(client: Client, task_id: str) -> tasks.GetTaskResult:
        request = tasks.GetTaskRequest(params=tasks.TaskParams(task_id=task_id))
        return await client.session.send_request(request, tasks.GetTaskResult)

    async def scenario() -> None:
        async with modern(mesh, mesh.tokens["shop"], extensions=[tasks.TasksClient(on_task=ids.append)]) as owner:
            assert tasks.EXTENSION in (owner.server_capabilities.extensions or {})
            call = asyncio.ensure_future(owner.call_tool("demo.mcp.hold", {"n": 40}))
            with anyio.fail_after(60):
                while not ids or "40" not in STARTED:
                    await anyio.sleep(0.1)
            assert (await get(owner, ids[0])).status == "working"
            async with modern(mesh, mesh.tokens["narrow"], extensions=[tasks.TasksClient()]) as other:
                for request in (tasks.GetTaskRequest(params=tasks.TaskParams(task_id=ids[0])),
                                tasks.CancelTaskRequest(params=tasks.TaskParams(task_id=ids[0]))):
                    with pytest.raises(MCPError, match="Task not found"):
                        await other.session.send_request(request, tasks.Acknowledged)
            assert (await get(owner, ids[0])).status == "working", "another app's cancel cancelled nothing"
            call.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await call
            with anyio.fail_after(60):
                while (task := await get(owner, ids[0])).status == "working":
                    await anyio.sleep(0.3)
            assert task.status == "cancelled", task

    asyncio.run(scenario())


def test_the_2025_06_18_revision_answers_a_question_through_elicitation_in_the_session(mesh: Mesh) -> None:
    """INPUT_REQUIRED on the handshake era: the official ClientSession, initialized at 2025-06-18 with an elicitation
    callback, is asked the question in the call's session (elicitation/create); its answer continues the same message
    and the call returns the next turn's result. A declined question is a tool error that says so."""
    from mcp.client import session as client_session

    from examples.interview_agent import agent as interview

    asked: list[str] = []

    async def answer(_context: Any, params: types.ElicitRequestParams) -> types.ElicitResult:
        asked.append(params.message)
        return types.ElicitResult(action="accept", content={"name": "Ada"})

    async def decline(_context: Any, params: types.ElicitRequestParams) -> types.ElicitResult:
        return types.ElicitResult(action="decline")

    async def call(callback: Any) -> types.CallToolResult:
        http = httpx2.AsyncClient(headers={"Authorization": f"Bearer {mesh.tokens['shop']}"},
                                  timeout=httpx2.Timeout(30, read=120))
        async with http, streamable_http_client(mesh.url, http_client=http) as (read, write), \
                client_session.ClientSession(read, write, elicitation_callback=callback) as client:
            assert (await client.initialize()).protocol_version == "2025-06-18"
            return await client.call_tool("demo.interview", {"greeting": "Hi"})

    with running(interview), pytest.MonkeyPatch.context() as patch:
        patch.setattr(client_session, "LATEST_HANDSHAKE_VERSION", "2025-06-18")
        wait_for(lambda: "demo.interview" in asyncio.run(tool_names(mesh, "shop")), 60, "the interview tool",
                 interval=0.5)
        result = asyncio.run(call(answer))
        assert result.is_error is False and result.structured_content == {"greeting": "Hi, Ada!", "turns": 1}
        assert asked == ["What is your name?"]
        declined = asyncio.run(call(decline))
        assert declined.is_error is True
        block = declined.content[0]
        assert isinstance(block, types.TextContent) and "declined" in block.text, block.text


def test_reach_mcp_stdio_relays_both_revisions(mesh: Mesh) -> None:
    """`reach mcp stdio` (a real process) with the official clients: the 2026-07-28 Client discovers it (tool-list
    changes announced, the Tasks extension declared), calls echo and answers a question through the Multi Round-Trip;
    a ClientSession at 2025-06-18 lists, calls and is asked the question as an elicitation in its session."""
    import os

    from mcp.client import session as client_session
    from mcp.client.stdio import StdioServerParameters, stdio_client

    from examples.interview_agent import agent as interview

    relay = StdioServerParameters(command=sys.executable, args=["-m", "reach", "mcp", "stdio", "--url", mesh.url],
                                  env={**os.environ, "REACH_MCP_TOKEN": mesh.tokens["shop"], "PYTHONPATH": str(ROOT)},
                                  cwd=str(ROOT))

    async def answer(_context: Any, params: types.ElicitRequestParams) -> types.ElicitResult:
        return types.ElicitResult(action="accept", content={"name": "Ada"})

    async def modern_client() -> None:
        async with Client(relay, elicitation_callback=answer, extensions=[tasks.TasksClient()]) as client:
            assert client.protocol_version == MODERN
            assert client.server_capabilities.tools is not None and client.server_capabilities.tools.list_changed
            assert tasks.EXTENSION in (client.server_capabilities.extensions or {})
            assert "demo.echo" in {t.name for t in (await client.list_tools()).tools}
            echoed = await client.call_tool("demo.echo", {"text": "relayed"})
            assert echoed.structured_content == {"text": "relayed"}, echoed
            asked = await client.call_tool("demo.interview", {"greeting": "Hi"})
            assert asked.structured_content == {"greeting": "Hi, Ada!", "turns": 1}, asked

    async def legacy_client() -> None:
        async with stdio_client(relay) as (read, write), \
                client_session.ClientSession(read, write, elicitation_callback=answer) as client:
            assert (await client.initialize()).protocol_version == "2025-06-18"
            assert "demo.echo" in {t.name for t in (await client.list_tools()).tools}
            asked = await client.call_tool("demo.interview", {"greeting": "Hi"})
            assert asked.structured_content == {"greeting": "Hi, Ada!", "turns": 1}, asked

    with running(interview):
        wait_for(lambda: "demo.interview" in asyncio.run(tool_names(mesh, "shop")), 60, "the interview tool",
                 interval=0.5)
        asyncio.run(modern_client())
        with pytest.MonkeyPatch.context() as patch:
            patch.setattr(client_session, "LATEST_HANDSHAKE_VERSION", "2025-06-18")
            asyncio.run(legacy_client())
