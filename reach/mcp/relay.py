"""`reach mcp stdio`: MCP over stdio for local assistants, relayed to a gateway's /mcp (streamable HTTP).

The local process holds no broker, Redis or secrets key: it speaks to the gateway as the official SDK's `Client`
(which probes `server/discover` and speaks the 2026-07-28 revision with Reach's gateway, falling back to the
handshake era with an older one), with the app key (`Authorization: Bearer <key_id>.rat_<hex>`), and serves the
assistant on stdin/stdout in whichever revision the assistant speaks:

- tools/list and tools/call are forwarded; a tool-list change upstream (`subscriptions/listen`, or the handshake
  era's notification) is told downstream the same two ways (a `subscriptions/listen` stream of the assistant, and
  `notifications/tools/list_changed` on its session);
- a question (INPUT_REQUIRED) reaches a 2026-07-28 assistant as the gateway's `InputRequiredResult` (its retry with
  `requestState` / `inputResponses` is forwarded as it is); a handshake-era assistant that declared elicitation is
  asked in its session, and the answer is sent upstream as the Multi Round-Trip retry;
- a long call (the Tasks extension, which the relay always declares upstream) reaches an assistant that declared the
  extension as the task handle, and its tasks/get, tasks/update and tasks/cancel are forwarded (the gateway checks
  that the task is the app's); for any other assistant the relay polls the task itself and answers the result;
- an assistant's cancellation cancels the upstream call (the SDK sends notifications/cancelled, or tasks/cancel).

The gateway's answers are read up to PEER_ANSWER_BYTES (reach/bodylimit.py), as every client of a peer's is."""

from __future__ import annotations

import contextlib
import logging
from collections.abc import AsyncIterator
from typing import Any

import anyio
import httpx2
import mcp_types as types
from mcp import Client
from mcp.client.extension import ClaimContext
from mcp.client.session import ClientSession, IncomingMessage
from mcp.client.streamable_http import streamable_http_client
from mcp.server.context import ServerRequestContext
from mcp.server.mcpserver import require_client_extension
from mcp.server.stdio import stdio_server
from mcp.server.subscriptions import InMemorySubscriptionBus, ListenHandler, ToolsListChanged
from mcp.shared.exceptions import MCPError
from mcp_types.version import MODERN_PROTOCOL_VERSIONS

from reach.bodylimit import PEER_ANSWER_BYTES, bound
from reach.mcp import tasks, tools
from reach.mcp.server import MAX_ASKED, SERVER_NAME, ReachServer, declares_tasks, session_ask

log = logging.getLogger("reach.mcp.relay")
RESERVED_META = "io.modelcontextprotocol/"  # the revision's envelope keys in `_meta`
Relayed = types.CallToolResult | types.InputRequiredResult | tasks.CreateTaskResult


class Relay:
    """The stdio server's handlers over an upstream ClientSession (the session of an SDK `Client`)."""

    def __init__(self, upstream: ClientSession) -> None:
        self.upstream = upstream
        self._connection: Any = None  # the assistant's connection: list_changed goes on its standalone channel
        self.bus = InMemorySubscriptionBus()
        self.listen = ListenHandler(self.bus, max_subscriptions=16, max_buffered_events=16)

    async def changed(self) -> None:
        """The gateway's tool list changed: tell the assistant (its session, and its listen streams)."""
        if self._connection is not None:
            with contextlib.suppress(Exception):  # a session that went away hears nothing
                await self._connection.outbound.notify("notifications/tools/list_changed", None)
        await self.bus.publish(ToolsListChanged())

    async def on_upstream(self, message: IncomingMessage) -> None:
        """ClientSession's message handler: forward the gateway's tools/list_changed to the assistant."""
        if isinstance(message, types.ToolListChangedNotification):
            await self.changed()
        elif isinstance(message, Exception):
            log.warning("the gateway's stream failed: %s", message)

    async def list_tools(self, ctx: ServerRequestContext[Any, Any],
                         params: types.PaginatedRequestParams | None) -> types.ListToolsResult:
        self._connection = getattr(ctx.session, "_connection", None)
        return await self.upstream.list_tools(params=params)

    async def call_tool(self, ctx: ServerRequestContext[Any, Any], params: types.CallToolRequestParams) -> Relayed:
        try:
            result = await self._call(params.name, params.arguments, params.meta, params.input_responses,
                                      params.request_state)
            modern = ctx.protocol_version in MODERN_PROTOCOL_VERSIONS
            ask = session_ask(ctx)
            asked_times = 0
            while ask is not None and asked_times < MAX_ASKED and isinstance(result, types.InputRequiredResult):
                asked_times += 1  # the handshake era: asked in the session, the answer sent as the retry
                responses = {key: await ask(asked.params) for key, asked in (result.input_requests or {}).items()
                             if isinstance(asked, types.ElicitRequest)
                             and isinstance(asked.params, types.ElicitRequestFormParams)}
                result = await self._call(params.name, params.arguments, params.meta, responses,
                                          result.request_state)
            if isinstance(result, types.InputRequiredResult) and not modern:
                return tools.error("input_required: the capability asks a question and this assistant does not "
                                   "take elicitation; answer it with POST /v1/messages/{id}:input")
            if isinstance(result, tasks.CreateTaskResult) and not declares_tasks(ctx):
                return await tasks.TasksClient(answer=_answer(ask))._resolve(  # noqa: SLF001 - the same driver
                    result, ClaimContext(session=self.upstream, tool_name=params.name, read_timeout_seconds=None))
            return result
        except MCPError:
            raise
        except Exception as exc:  # noqa: BLE001 - the gateway's refusal or a broken stream: the assistant sees why
            return tools.error(f"relay_error: {exc}"[:1000])

    async def _call(self, name: str, arguments: Any, meta: Any, responses: Any, state: str | None) -> Relayed:
        # the assistant's own envelope keys (its protocol version, capabilities) are not the relay's to send upstream
        passed: Any = {k: v for k, v in (meta or {}).items() if not str(k).startswith(RESERVED_META)} or None
        result = await self.upstream.call_tool(name, arguments, meta=passed, input_responses=responses or None,
                                               request_state=state, allow_input_required=True, allow_claimed=True)
        if not isinstance(result, types.CallToolResult | types.InputRequiredResult | tasks.CreateTaskResult):
            return tools.error(f"relay_error: the gateway answered an unknown result ({type(result).__name__})")
        return result

    def _declared(self, ctx: ServerRequestContext[Any, Any]) -> None:
        if ctx.protocol_version not in MODERN_PROTOCOL_VERSIONS:
            raise MCPError(types.METHOD_NOT_FOUND, "Method not found", data=ctx.method)
        require_client_extension(ctx, tasks.EXTENSION)

    async def get_task(self, ctx: ServerRequestContext[Any, Any], params: tasks.TaskParams) -> tasks.GetTaskResult:
        self._declared(ctx)
        return await self.upstream.send_request(tasks.GetTaskRequest(params=tasks.TaskParams(
            task_id=params.task_id)), tasks.GetTaskResult)

    async def update_task(self, ctx: ServerRequestContext[Any, Any],
                          params: tasks.UpdateTaskParams) -> tasks.Acknowledged:
        self._declared(ctx)
        return await self.upstream.send_request(tasks.UpdateTaskRequest(params=tasks.UpdateTaskParams(
            task_id=params.task_id, input_responses=params.input_responses)), tasks.Acknowledged)

    async def cancel_task(self, ctx: ServerRequestContext[Any, Any], params: tasks.TaskParams) -> tasks.Acknowledged:
        self._declared(ctx)
        return await self.upstream.send_request(tasks.CancelTaskRequest(params=tasks.TaskParams(
            task_id=params.task_id)), tasks.Acknowledged)

    def server(self) -> ReachServer:
        server = ReachServer(SERVER_NAME, version="1", on_list_tools=self.list_tools,
                             on_call_tool=self.call_tool,  # type: ignore[arg-type]  # a task handle passes as claimed
                             on_subscriptions_listen=self.listen)
        server.add_request_handler("tasks/get", tasks.TaskParams, self.get_task)
        server.add_request_handler("tasks/update", tasks.UpdateTaskParams, self.update_task)
        server.add_request_handler("tasks/cancel", tasks.TaskParams, self.cancel_task)
        server.extensions[tasks.EXTENSION] = {}
        return server


def _answer(ask: Any) -> tasks.Answer | None:
    if ask is None:
        return None

    async def answer(params: types.ElicitRequestParams) -> types.ElicitResult:
        if not isinstance(params, types.ElicitRequestFormParams):
            return types.ElicitResult(action="decline")
        return await ask(params)

    return answer


def http_client(token: str, url: str = "", transport: httpx2.AsyncBaseTransport | None = None) -> httpx2.AsyncClient:
    """The app key on every request; reads wait long (a tool call's answer and the notification stream), and each
    answer is read up to PEER_ANSWER_BYTES."""
    return bound(httpx2.AsyncClient(headers={"Authorization": f"Bearer {token}"}, transport=transport,
                                    timeout=httpx2.Timeout(30.0, read=300.0)),
                 PEER_ANSWER_BYTES, f"the gateway at {url[:200]}")


@contextlib.asynccontextmanager
async def upstream_relay(url: str, token: str,
                         transport: httpx2.AsyncBaseTransport | None = None) -> AsyncIterator[Relay]:
    """The relay over an upstream `Client` of the gateway at `url` (either revision), hearing its tool-list changes."""
    relay: Relay | None = None

    async def handler(message: IncomingMessage) -> None:
        if relay is not None:
            await relay.on_upstream(message)

    async with http_client(token, url, transport) as http, \
            Client(streamable_http_client(url, http_client=http), extensions=[tasks.TasksClient()],
                   message_handler=handler) as client:
        relay = Relay(client.session)
        async with anyio.create_task_group() as group:
            if client.protocol_version in MODERN_PROTOCOL_VERSIONS:
                group.start_soon(_hear, client, relay)
            yield relay
            group.cancel_scope.cancel()


async def _hear(client: Client, relay: Relay) -> None:
    """The gateway's tool-list changes on the 2026-07-28 revision (`subscriptions/listen`), told downstream."""
    while True:
        try:
            async with client.listen(tools_list_changed=True) as heard:
                async for event in heard:
                    if isinstance(event, ToolsListChanged):
                        await relay.changed()
        except Exception as exc:  # noqa: BLE001 - a broken listen stream is opened again
            log.warning("the gateway's listen stream failed (%s); listening again", exc)
        await anyio.sleep(1.0)


async def serve_stdio(url: str, token: str) -> None:
    """Relay stdio to `url` until the assistant closes stdin."""
    async with upstream_relay(url, token) as relay:
        server = relay.server()
        async with stdio_server() as (down_read, down_write):
            await server.run(down_read, down_write, server.create_initialization_options())
