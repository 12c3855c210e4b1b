"""`reach mcp stdio`: MCP over stdio for local assistants, relayed to a gateway's /mcp (streamable HTTP).

The local process holds no broker, Redis or secrets key: it opens one upstream session with the app key
(`Authorization: Bearer <key_id>.<secret>`) and forwards tools/list and tools/call, so every call goes through
the gateway's door like any other; the gateway's notifications/tools/list_changed is forwarded to the
assistant, and an assistant's cancellation cancels the upstream call (the SDK sends notifications/cancelled).
The gateway's answers are read up to PEER_ANSWER_BYTES (reach/bodylimit.py), as every client of a peer's is."""

from __future__ import annotations

import logging
from typing import Any

import httpx2
import mcp_types as types
from mcp.client.session import ClientSession, IncomingMessage
from mcp.client.streamable_http import streamable_http_client
from mcp.server.context import ServerRequestContext
from mcp.server.stdio import stdio_server

from reach.bodylimit import PEER_ANSWER_BYTES, bound
from reach.mcp import tools
from reach.mcp.server import SERVER_NAME, ReachServer

log = logging.getLogger("reach.mcp.relay")


class Relay:
    """The stdio server's handlers over an upstream ClientSession."""

    def __init__(self, upstream: ClientSession) -> None:
        self.upstream = upstream
        self._connection: Any = None  # the assistant's connection: list_changed goes on its standalone channel

    async def on_upstream(self, message: IncomingMessage) -> None:
        """ClientSession's message handler: forward the gateway's tools/list_changed to the assistant."""
        if isinstance(message, types.ToolListChangedNotification) and self._connection is not None:
            await self._connection.outbound.notify("notifications/tools/list_changed", None)
        elif isinstance(message, Exception):
            log.warning("the gateway's stream failed: %s", message)

    async def list_tools(self, ctx: ServerRequestContext[Any, Any],
                         params: types.PaginatedRequestParams | None) -> types.ListToolsResult:
        self._connection = getattr(ctx.session, "_connection", None)
        return await self.upstream.list_tools(params=params)

    async def call_tool(self, ctx: ServerRequestContext[Any, Any],
                        params: types.CallToolRequestParams) -> types.CallToolResult:
        try:
            return await self.upstream.call_tool(params.name, params.arguments, meta=params.meta)
        except Exception as exc:  # noqa: BLE001 - the gateway's refusal or a broken stream: the assistant sees why
            return tools.error(f"relay_error: {exc}"[:1000])

    def server(self) -> ReachServer:
        return ReachServer(SERVER_NAME, version="1", on_list_tools=self.list_tools, on_call_tool=self.call_tool)


def http_client(token: str, url: str = "", transport: httpx2.AsyncBaseTransport | None = None) -> httpx2.AsyncClient:
    """The app key on every request; reads wait long (a tool call's answer and the notification stream), and each
    answer is read up to PEER_ANSWER_BYTES."""
    return bound(httpx2.AsyncClient(headers={"Authorization": f"Bearer {token}"}, transport=transport,
                                    timeout=httpx2.Timeout(30.0, read=300.0)),
                 PEER_ANSWER_BYTES, f"the gateway at {url[:200]}")


async def serve_stdio(url: str, token: str) -> None:
    """Relay stdio to `url` until the assistant closes stdin."""
    async with http_client(token, url) as http, streamable_http_client(url, http_client=http) as (read, write):
        relay: Relay | None = None

        async def handler(message: IncomingMessage) -> None:
            if relay is not None:
                await relay.on_upstream(message)

        async with ClientSession(read, write, message_handler=handler) as upstream:
            await upstream.initialize()
            relay = Relay(upstream)
            server = relay.server()
            async with stdio_server() as (down_read, down_write):
                await server.run(down_read, down_write, server.create_initialization_options())
