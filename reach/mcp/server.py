"""The MCP server over the port (reach.mcp.ports.Host): tools/list and tools/call with the official SDK's
lowlevel Server, served as streamable HTTP by `McpEndpoint`, the ASGI app the gateway mounts at /mcp.

Every HTTP request is authenticated (`Authorization: Bearer <key_id>.<secret>`, the app keys A2A takes) before
the SDK sees it; a session is bound to the app that opened it (the SDK answers 404 to another app's use of its
id), and each request acts as the app its own token names, so a revoked key stops working mid-session."""

from __future__ import annotations

import contextlib
import logging
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import anyio
import mcp_types as types
from mcp.server.auth.middleware.bearer_auth import AuthenticatedUser
from mcp.server.auth.provider import AccessToken
from mcp.server.context import ServerRequestContext
from mcp.server.lowlevel.server import NotificationOptions, Server
from mcp.server.models import InitializationOptions
from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
from mcp.shared.exceptions import MCPError
from starlette.responses import JSONResponse
from starlette.types import Receive, Scope, Send

from reach.callers import AuthFailure, CallerApp
from reach.errors import InfraUnavailable
from reach.mcp import tools
from reach.mcp.ports import Host, Refused

APP = "reach.app"  # the ASGI scope key of the CallerApp the request's bearer token named
IDEMPOTENCY_META = "agent-reach/idempotency_key"  # tools/call `_meta`: the request's idempotency_key
MAX_IDEMPOTENCY_KEY = 200
WATCH_S = 2.0  # how often the watched sessions' tool lists are compared with the registry
SESSION_IDLE_S = 30 * 60.0
MAX_SESSIONS = 1000  # per gateway replica: sessions are memory (and a watch) each
SERVER_NAME = "agent-reach"
log = logging.getLogger("reach.mcp")


@dataclass
class _Watch:
    app: CallerApp
    seen: tuple[tuple[str, str, str, str], ...]
    connection: Any  # mcp.server.connection.Connection: its standalone channel carries list_changed


class ToolWatch:
    """Sessions that listed the tools; one loop compares each one's tools with the registry every `every_s` and
    sends notifications/tools/list_changed on the session's standalone stream when they changed."""

    def __init__(self, host: Host, every_s: float = WATCH_S) -> None:
        self._host = host
        self._every_s = every_s
        self._watched: dict[int, _Watch] = {}

    def __len__(self) -> int:
        return len(self._watched)

    def watch(self, ctx: ServerRequestContext[Any, Any], app: CallerApp, seen: tuple[Any, ...]) -> None:
        # the SDK hands handlers a per-request session; the connection it holds lives as long as the MCP session
        connection = getattr(ctx.session, "_connection", None)
        if connection is None or getattr(connection, "session_id", None) is None:
            return  # stateless: no stream to notify on
        key = id(connection)
        if key not in self._watched:
            connection.exit_stack.callback(self._watched.pop, key, None)
        self._watched[key] = _Watch(app, seen, connection)

    async def check(self) -> int:
        """One pass; the number of sessions notified."""
        notified = 0
        for key, watch in list(self._watched.items()):
            now = tools.fingerprint(self._host.capabilities(watch.app))
            if now == watch.seen:
                continue
            watch.seen = now
            try:
                await watch.connection.outbound.notify("notifications/tools/list_changed", None)
                notified += 1
            except Exception as exc:  # noqa: BLE001 - a session that went away stops being watched
                log.debug("tools/list_changed not delivered (%s); unwatching", exc)
                self._watched.pop(key, None)
        return notified

    async def run(self) -> None:
        while True:
            await anyio.sleep(self._every_s)
            await self.check()


class ReachServer(Server[Any]):
    """The SDK's lowlevel Server, announcing tools.listChanged (the session manager builds the init options)."""

    def create_initialization_options(self, notification_options: NotificationOptions | None = None,
                                      experimental_capabilities: dict[str, dict[str, Any]] | None = None,
                                      extensions: dict[str, dict[str, Any]] | None = None) -> InitializationOptions:
        return super().create_initialization_options(notification_options or NotificationOptions(tools_changed=True),
                                                     experimental_capabilities, extensions)


def caller(ctx: ServerRequestContext[Any, Any]) -> CallerApp:
    request = ctx.request
    app = request.scope.get(APP) if request is not None and hasattr(request, "scope") else None
    if not isinstance(app, CallerApp):  # McpEndpoint authenticates before the SDK runs: never reached without
        raise MCPError(-32001, "unauthenticated")
    return app


def _idempotency_key(params: types.CallToolRequestParams) -> str | None:
    meta: Any = params.meta or {}
    key = meta.get(IDEMPOTENCY_META) if isinstance(meta, dict) else None
    return key[:MAX_IDEMPOTENCY_KEY] if isinstance(key, str) and key else None


async def call(host: Host, app: CallerApp, params: types.CallToolRequestParams) -> types.CallToolResult:
    """One tool call through the door; the result, or a tool error with the door's or the receipt's reason. A
    call cancelled by the client (notifications/cancelled) cancels the message."""
    cap = tools.newest(host.capabilities(app)).get(params.name)
    if cap is None:
        return tools.unknown(params.name)
    try:
        pending = await host.send(app, capability=cap.name, payload=tools.payload_of(cap, params.arguments),
                                  idempotency_key=_idempotency_key(params))
    except Refused as refusal:
        return tools.refused(refusal)
    except InfraUnavailable:
        return tools.error("unavailable: the bus did not answer; retry in a few seconds")
    try:
        ended = await pending.ended(host.call_timeout_s)
    except anyio.get_cancelled_exc_class():  # the client cancelled the call (or its session ended)
        pending.forget()
        with anyio.CancelScope(shield=True), contextlib.suppress(Exception):
            await host.cancel(app, pending.message_id)
        raise
    return tools.result_of(ended)


def build_server(host: Host, watch: ToolWatch) -> ReachServer:
    async def list_tools(ctx: ServerRequestContext[Any, Any],
                         params: types.PaginatedRequestParams | None) -> types.ListToolsResult:
        app = caller(ctx)
        caps = host.capabilities(app)
        watch.watch(ctx, app, tools.fingerprint(caps))
        return types.ListToolsResult(tools=tools.tools(caps))

    async def call_tool(ctx: ServerRequestContext[Any, Any],
                        params: types.CallToolRequestParams) -> types.CallToolResult:
        app = caller(ctx)
        try:
            return await call(host, app, params)
        except Exception:  # noqa: BLE001 - the log has it; the caller learns nothing of the internals
            log.exception("tools/call %s of %s failed", params.name[:200], app.app_id)
            return tools.error("internal_error: the call could not be completed; retry, or ask an operator")

    @contextlib.asynccontextmanager
    async def lifespan(_server: Server[Any]) -> AsyncIterator[dict[str, Any]]:
        async with anyio.create_task_group() as group:
            group.start_soon(watch.run)
            yield {}
            group.cancel_scope.cancel()

    return ReachServer(SERVER_NAME, version="1", lifespan=lifespan, on_list_tools=list_tools,
                       on_call_tool=call_tool,
                       instructions="Agent-Reach capabilities as tools: each call is one message on the bus, with "
                                    "receipts, retries and routing; its result is the tool's structured content.")


def _unauthenticated(failure: AuthFailure) -> JSONResponse:
    return JSONResponse({"error": failure.code or "unauthorized", "message": failure.reason,
                         "hint": "send Authorization: Bearer <key_id>.<secret> of a gateway app key"},
                        status_code=401, headers={"WWW-Authenticate": 'Bearer realm="agent-reach"'})


class McpEndpoint:
    """The ASGI app at /mcp: authenticate, then the SDK's streamable HTTP session manager. `run()` must be
    entered for the app's lifetime (the gateway's lifespan does)."""

    def __init__(self, host: Host, *, watch_s: float = WATCH_S, max_sessions: int = MAX_SESSIONS,
                 idle_s: float = SESSION_IDLE_S) -> None:
        self.host = host
        self.watch = ToolWatch(host, watch_s)
        self.server = build_server(host, self.watch)
        self.manager = StreamableHTTPSessionManager(app=self.server, max_request_body_size=host.max_body_bytes,
                                                    session_idle_timeout=idle_s, max_sessions=max_sessions)

    @contextlib.asynccontextmanager
    async def run(self) -> AsyncIterator[None]:
        async with self.manager.run():
            yield

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return
        authorization = next((v.decode("latin-1") for k, v in scope["headers"] if k == b"authorization"), None)
        try:
            outcome = self.host.authenticate(authorization)
        except InfraUnavailable as exc:
            response = JSONResponse({"error": "unavailable", "message": str(exc)}, status_code=503,
                                    headers={"Retry-After": "1"})
            await response(scope, receive, send)
            return
        if isinstance(outcome, AuthFailure):
            await _unauthenticated(outcome)(scope, receive, send)
            return
        scope[APP] = outcome
        scope.setdefault("state", {})["app_id"] = outcome.app_id  # the request metrics label by it
        # the SDK binds a session to the principal that opened it: another app's requests get 404 for its id
        scope["user"] = AuthenticatedUser(AccessToken(token="", client_id=outcome.app_id, scopes=[]))
        await self.manager.handle_request(scope, receive, send)
