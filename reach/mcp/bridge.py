"""`reach mcp bridge`: an existing MCP server (a command over stdio, or a streamable HTTP URL) as one agent instance.

Each tool the server lists becomes a capability `<prefix>.<tool>` whose input contract is the tool's input schema
(its output contract the tool's output schema, when it declares one), served by the agent SDK like any other: leases,
receipts, retries, breakers. A tool whose schema is not a valid JSON Schema, or whose name cannot become a capability
name (or is longer than the product's names allow: MAX_TOOL_NAME, MAX_CAPABILITY), is skipped with a warning; at
most MAX_PAGES pages of `tools/list` and MAX_TOOLS tools are read (a server that pages on and on is cut off, with a
warning). A call ends by its tool result: structured content (else the text, parsed as JSON
when it is JSON) is the COMPLETED result; a tool error (`isError`) is FAILED `TOOL_ERROR` with the tool's text, not
retried; a broken or silent server is a TransientError, retried by the policy. The server's tool list is read once at
start: restart the bridge to pick up a changed list (docs/mcp.md#bridge). The session is the SDK's `Client`: the
2026-07-28 revision with a server that serves `server/discover`, else the handshake era; a long call a server answers
with a task (the Tasks extension, declared) is polled to its result (reach.mcp.tasks). The MCP session lives on a
thread of its own (its own event loop), so the SDK's loop only waits on futures; when the server goes away the bridge
stops, drained."""

from __future__ import annotations

import asyncio
import json
import logging
import re
import shlex
import threading
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from concurrent.futures import Future
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from dataclasses import dataclass
from typing import Any

import mcp_types as types

from reach.agent import Agent, BusinessError, InvalidDeclaration, TransientError
from reach.agent.agent import Context
from reach.bodylimit import MARK
from reach.errors import ReachError
from reach.names import check_agent_id, check_capability

log = logging.getLogger("reach.mcp.bridge")
START_TIMEOUT_S = 30.0  # spawn (or connect), initialize and list the tools
DEFAULT_CALL_TIMEOUT_S = 300.0
MAX_TEXT = 1000  # of a tool error's text, in the FAILED receipt's message
MAX_TOOL_NAME = 128  # MCP's advice for tool names; longer ones are skipped before any work is done on them
MAX_CAPABILITY = 200  # `<ns>.cap.<capability>` must stay within Kafka's 249 characters, with room for the namespace
MAX_PAGES = 100  # pages of tools/list read at start
MAX_TOOLS = 1_000  # tools served by one bridge

Transport = Callable[[], AbstractAsyncContextManager[Any]]
"""Opens the (read, write) streams of one MCP session (stdio_client or streamable_http_client)."""


class BridgeError(ReachError):
    """The MCP server could not be started, reached or listed; or it offers no tool the bridge can serve."""

    exit_code = 1


# -- pure: names, contracts, results -------------------------------------------------------------------


def capability_name(prefix: str, tool: str) -> str | None:
    """`<prefix>.<tool>` in the capability alphabet (camelCase and `_` become `-`, lower case), or None (also when
    the tool's name or the capability name is longer than MAX_TOOL_NAME / MAX_CAPABILITY)."""
    if len(tool) > MAX_TOOL_NAME:
        return None
    dashed = re.sub(r"(?<=[a-z0-9])(?=[A-Z])", "-", tool)
    segment = re.sub(r"[^a-z0-9]+", "-", dashed.lower()).strip("-")
    try:
        name = check_capability(f"{prefix}.{segment}") if segment else None
    except ReachError:
        return None
    return name if name is None or len(name) <= MAX_CAPABILITY else None


def _shown(tool: str) -> str:
    """A tool name as a log line shows it (a hostile server's name can be megabytes)."""
    return repr(tool[:80] + ("..." if len(tool) > 80 else ""))


@dataclass(frozen=True, slots=True)
class Bridged:
    """One tool served as a capability."""

    tool: str
    capability: str
    input_schema: dict[str, Any]
    output_schema: dict[str, Any] | None
    description: str | None


def plan(prefix: str, tools: list[types.Tool]) -> tuple[list[Bridged], list[str]]:
    """The tools to serve and, for each one skipped, why (a warning for the log)."""
    from reach.agent.contract import compile_schema

    served: list[Bridged] = []
    skipped: list[str] = []
    taken: dict[str, str] = {}
    for tool in tools:
        name = capability_name(prefix, tool.name)
        if name is None:
            skipped.append(f"tool {_shown(tool.name)}: no capability name of at most {MAX_CAPABILITY} characters "
                           f"can be made of it under {prefix!r} (tool names: at most {MAX_TOOL_NAME} characters)")
            continue
        if name in taken:
            skipped.append(f"tool {_shown(tool.name)}: its capability name {name} is already {taken[name]!r}'s")
            continue
        schemas: list[dict[str, Any] | None] = []
        try:
            for which, schema in (("input", tool.input_schema), ("output", tool.output_schema)):
                if schema is not None:
                    compile_schema(dict(schema), f"tool {tool.name!r} {which} schema")
                schemas.append(dict(schema) if schema is not None else None)
        except InvalidDeclaration as exc:
            skipped.append(f"{exc} (skipped)")
            continue
        taken[name] = tool.name
        contract = schemas[0] or {"type": "object"}
        if tool.description and "description" not in contract:
            contract = {**contract, "description": tool.description}  # what `reach mcp` and the console show
        served.append(Bridged(tool=tool.name, capability=name, input_schema=contract, output_schema=schemas[1],
                              description=tool.description))
    return served, skipped


def _text(result: types.CallToolResult) -> str:
    parts = [block.text for block in result.content if isinstance(block, types.TextContent)]
    return "\n".join(parts)


def outcome(tool: str, result: types.CallToolResult) -> Any:
    """The capability's result for a tool result; a tool error raises BusinessError TOOL_ERROR (FAILED)."""
    if result.is_error:
        text = _text(result) or "the tool reported an error and said nothing more"
        raise BusinessError("TOOL_ERROR", f"MCP tool {tool!r}: {text}"[:MAX_TEXT])
    if result.structured_content is not None:
        return result.structured_content
    text = _text(result)
    if len(result.content) == 1 and text:
        try:
            return json.loads(text)
        except ValueError:
            return text
    return [block.model_dump(mode="json", by_alias=True, exclude_none=True) for block in result.content]


# -- the session on its own thread ---------------------------------------------------------------------


class ToolSession:
    """One MCP ClientSession on a thread of its own: `start()` lists the tools, `call()` is thread-safe and returns
    a concurrent Future; `on_exit` runs (on that thread) when the session ends for any reason but `close()`."""

    def __init__(self, transport: Transport, *, call_timeout_s: float = DEFAULT_CALL_TIMEOUT_S,
                 on_exit: Callable[[BaseException | None], None] = lambda _exc: None) -> None:
        self._transport = transport
        self._call_timeout_s = call_timeout_s
        self._on_exit = on_exit
        self._ready = threading.Event()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None
        self._session: Any = None
        self.protocol_version: str | None = None  # the revision the server and the bridge agreed on
        self._tools: list[types.Tool] = []
        self._error: BaseException | None = None
        self._closing = False
        self._thread = threading.Thread(target=self._main, name="reach-mcp-bridge", daemon=True)

    def start(self, timeout_s: float = START_TIMEOUT_S) -> list[types.Tool]:
        """Connect, initialize and list every tool (all pages); BridgeError when that fails or takes too long."""
        self._thread.start()
        if not self._ready.wait(timeout_s):
            self.close()
            raise BridgeError(f"the MCP server did not initialize and list its tools within {timeout_s:g} s")
        if self._error is not None:
            raise BridgeError(f"the MCP server could not be started or listed: {self._error!r}"[:MAX_TEXT])
        return list(self._tools)

    def call(self, tool: str, arguments: Mapping[str, Any]) -> Future[types.CallToolResult]:
        loop, session = self._loop, self._session
        if loop is None or session is None or loop.is_closed():
            failed: Future[types.CallToolResult] = Future()
            failed.set_exception(TransientError("the MCP server's session is closed", code="MCP_UNAVAILABLE"))
            return failed
        return asyncio.run_coroutine_threadsafe(
            session.call_tool(tool, dict(arguments), read_timeout_seconds=self._call_timeout_s), loop)

    def close(self) -> None:
        """End the session (the server process is stopped by its transport) and wait for the thread."""
        self._closing = True
        if self._loop is not None and self._stop is not None and not self._loop.is_closed():
            try:
                self._loop.call_soon_threadsafe(self._stop.set)
            except RuntimeError:  # the loop closed in between
                pass
        if self._thread.is_alive() and self._thread is not threading.current_thread():
            self._thread.join(10.0)

    def _main(self) -> None:
        try:
            asyncio.run(self._serve())
        except BaseException as exc:  # noqa: BLE001 - the session's end, reported below
            self._error = self._error or exc
        finally:
            self._ready.set()
            if not self._closing:
                self._on_exit(self._error)

    async def _serve(self) -> None:
        from mcp import Client

        from reach.mcp.tasks import TasksClient

        self._stop = asyncio.Event()
        # the SDK's Client speaks the server's revision: server/discover (2026-07-28), else the handshake; a long
        # call the server answers with a task (the Tasks extension, declared) is polled to its result
        async with Client(self._transport(), extensions=[TasksClient()]) as client:
            self.protocol_version = client.protocol_version
            tools = await list_tools(lambda cursor: client.list_tools(cursor=cursor, cache_mode="refresh"))
            self._tools, self._session, self._loop = tools, client, asyncio.get_running_loop()
            self._ready.set()
            await self._stop.wait()


async def list_tools(page: Callable[[str | None], Awaitable[types.ListToolsResult]], *, max_pages: int = MAX_PAGES,
                     max_tools: int = MAX_TOOLS) -> list[types.Tool]:
    """Every tool the server lists, page by page, up to `max_pages` pages and `max_tools` tools (a warning says what
    was left unread): a server that pages forever or lists without end cannot hold the bridge's start."""
    tools: list[types.Tool] = []
    cursor: str | None = None
    for _ in range(max_pages):
        listed = await page(cursor)
        room = max_tools - len(tools)
        tools.extend(listed.tools[:room])
        cursor = listed.next_cursor
        if len(listed.tools) > room or (cursor and len(tools) >= max_tools):
            log.warning("the MCP server lists more than %d tools: serving the first %d", max_tools, max_tools)
            return tools
        if not cursor:
            return tools
    log.warning("the MCP server's tool list goes on past %d pages: serving the %d tools of those pages", max_pages,
                len(tools))
    return tools


def stdio_transport(command: str, env: Mapping[str, str] | None = None) -> Transport:
    """Spawn `command` (split as a shell would, not run by one) and speak MCP over its stdin/stdout."""
    from mcp.client.stdio import StdioServerParameters, stdio_client

    argv = shlex.split(command)
    if not argv:
        raise BridgeError("--command is empty: give the MCP server's command line, e.g. \"python server.py\"")
    params = StdioServerParameters(command=argv[0], args=argv[1:], env=dict(env) if env else None)
    return lambda: stdio_client(params)


def http_transport(url: str, authorization: str | None = None) -> Transport:
    """Streamable HTTP at `url`, with `Authorization: <authorization>` on every request when given; each answer is
    read up to PEER_ANSWER_BYTES (reach/bodylimit.py): a bigger one fails its call (a JSON-RPC error naming the
    limit, then MCP_UNAVAILABLE or, while starting, BridgeError), never the bridge's memory."""
    import httpx2
    from mcp.client.streamable_http import streamable_http_client

    from reach.bodylimit import PEER_ANSWER_BYTES, bound

    @asynccontextmanager
    async def connect() -> AsyncIterator[Any]:
        headers = {"Authorization": authorization} if authorization else {}
        http = bound(httpx2.AsyncClient(headers=headers, timeout=httpx2.Timeout(30.0, read=300.0)),
                     PEER_ANSWER_BYTES, f"the MCP server at {url[:200]}")
        async with http, streamable_http_client(url, http_client=http) as streams:
            yield streams

    return connect


# -- the agent -----------------------------------------------------------------------------------------


def _handler(session: ToolSession, bridged: Bridged) -> Callable[[Any, Context], Any]:
    async def call(payload: Any, ctx: Context) -> Any:
        ctx.ignore_returned_usage()  # the server's `usage` claim stays in the result, never the caller's charge
        arguments = payload if isinstance(payload, dict) else {}
        try:
            result = await asyncio.wrap_future(session.call(bridged.tool, arguments))
        except (BusinessError, TransientError):
            raise
        except Exception as exc:  # noqa: BLE001 - the server broke, went silent or refused the call: retryable
            if MARK in str(exc):  # its answer was over the limit: another attempt would read the same flood
                raise BusinessError("MCP_ANSWER_TOO_LARGE", f"MCP tool {bridged.tool!r}: {exc}"[:MAX_TEXT]) from None
            raise TransientError(f"MCP tool {bridged.tool!r} did not answer: {exc!r}"[:MAX_TEXT],
                                 code="MCP_UNAVAILABLE") from None
        return outcome(bridged.tool, result)

    call.__qualname__ = f"mcp_tool_{bridged.capability}"
    return call


def bridge_agent(session: ToolSession, tools: list[types.Tool], *, agent_id: str, prefix: str, version: str,
                 **agent_options: Any) -> Agent:
    """An Agent serving each usable tool as `<prefix>.<tool>`; BridgeError when none is usable."""
    check_capability(prefix)
    served, skipped = plan(prefix, tools)
    for why in skipped:
        log.warning("%s", why)
    if not served:
        raise BridgeError(f"the MCP server lists {len(tools)} tool(s) and none can be served as a capability "
                          f"under {prefix!r} (see the warnings above)")
    agent = Agent(agent_id, **agent_options)
    for bridged in served:
        agent.capability(bridged.capability, version=version, input_schema=bridged.input_schema,
                         output_schema=bridged.output_schema, tags=["mcp"])(_handler(session, bridged))
        log.info("MCP tool %r served as %s@%s", bridged.tool, bridged.capability, version)
    return agent


def run_bridge(transport: Transport, *, agent_id: str, prefix: str, version: str,
               call_timeout_s: float = DEFAULT_CALL_TIMEOUT_S, **agent_options: Any) -> None:
    """Start the MCP session, serve its tools until SIGTERM/SIGINT, or until the server goes away (then the
    instance drains and leaves, so the router stops sending it work)."""
    check_capability(prefix)  # before the server is spawned: a bad name is the caller's to fix
    check_agent_id(agent_id)
    agent: Agent | None = None

    def gone(exc: BaseException | None) -> None:
        log.error("the MCP server's session ended (%r): stopping the bridge", exc)
        if agent is not None:
            agent.stop()

    session = ToolSession(transport, call_timeout_s=call_timeout_s, on_exit=gone)
    tools = session.start()
    try:
        agent = bridge_agent(session, tools, agent_id=agent_id, prefix=prefix, version=version, **agent_options)
    except BaseException:
        session.close()
        raise
    log.info("bridging %d MCP tool(s) as %s, instance %s (MCP %s)", len(agent.capabilities), agent_id,
             agent.instance_id, session.protocol_version)
    try:
        agent.run()
    finally:
        session.close()
