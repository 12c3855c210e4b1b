"""The MCP server over the port (reach.mcp.ports.Host): tools/list and tools/call with the official SDK's
lowlevel Server, served as streamable HTTP by `McpEndpoint`, the ASGI app the gateway mounts at /mcp.

Every HTTP request is authenticated (`Authorization: Bearer <key_id>.rat_<hex>`, the app keys A2A takes) before
the SDK sees it, as the MCP authorization specification asks of a resource server: a request without a valid token
gets 401 with `WWW-Authenticate: Bearer resource_metadata="<.well-known/oauth-protected-resource URL>"`, a browser
`Origin` other than the allowed ones gets 403 (DNS rebinding), and the token is checked against this gateway's own
apps (its audience). A session is bound to the app that opened it (the SDK answers 404 to another app's use of its
id), and each request acts as the app its own token names, so a revoked key stops working mid-session. Opening a
session, a tool list and a notification stream each take a read token of the app; an app holds at most
`SessionLimits.per_app` sessions on a replica (docs/decisions/0059-one-admission-for-every-surface.md)."""

from __future__ import annotations

import contextlib
import dataclasses
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import Any, TypeVar

import anyio
import mcp_types as types
from mcp.server.auth.middleware.bearer_auth import AuthenticatedUser
from mcp.server.auth.provider import AccessToken
from mcp.server.caching import CacheHint
from mcp.server.context import ServerRequestContext
from mcp.server.lowlevel.server import NotificationOptions, Server
from mcp.server.mcpserver import require_client_extension
from mcp.server.models import InitializationOptions
from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
from mcp.server.subscriptions import InMemorySubscriptionBus, ListenHandler, ToolsListChanged
from mcp.shared.exceptions import MCPError
from mcp.shared.inbound import MCP_NAME_HEADER, decode_header_value
from mcp_types.version import MODERN_PROTOCOL_VERSIONS
from starlette.responses import JSONResponse
from starlette.types import Receive, Scope, Send

from reach.callers import AuthFailure, CallerApp
from reach.errors import InfraUnavailable
from reach.mcp import rounds, tasks, tools
from reach.mcp.ports import PENDING, Ended, Host, Refused, SessionLimits

APP = "reach.app"  # the ASGI scope key of the CallerApp the request's bearer token named
IDEMPOTENCY_META = "agent-reach/idempotency_key"  # tools/call `_meta`: the request's idempotency_key
MAX_IDEMPOTENCY_KEY = 200
WATCH_S = 2.0  # how often the watched sessions' tool lists are compared with the registry
WATCH_YIELD_EVERY = 200  # sessions compared between two yields to the event loop
SERVER_NAME = "agent-reach"
QUOTA_ERROR = -32029  # the JSON-RPC error of a tool list refused by the app's read quota
log = logging.getLogger("reach.mcp")


@dataclass
class _Watch:
    app: CallerApp
    seen: tuple[tuple[str, str, str, str], ...]
    connection: Any  # mcp.server.connection.Connection: its standalone channel carries list_changed


class ToolWatch:
    """Sessions that listed the tools; one loop compares each one's tools with the registry every `every_s` and
    sends notifications/tools/list_changed on the session's standalone stream when they changed."""

    def __init__(self, host: Host, every_s: float = WATCH_S, listen: AppListen | None = None) -> None:
        self._host = host
        self.every_s = every_s
        self._watched: dict[int, _Watch] = {}
        self.listen = listen or AppListen()
        self._heard: dict[Group, tuple[tuple[str, str, str, str], ...]] = {}  # each listened group's last list
        self.listen.on_new_group = self._learn  # a group's list as it is when its first listener comes

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
        """One pass; the number of sessions notified. The tool list is computed once per (tenant, capability list)
        in a pass, not once per session, and the loop yields every WATCH_YIELD_EVERY sessions: a thousand sessions
        of one app cost one registry read, and never hold the event loop for the whole pass."""
        notified = 0
        current: dict[Group, tuple[tuple[str, str, str, str], ...]] = {}
        for count, (key, watch) in enumerate(list(self._watched.items()), start=1):
            if count % WATCH_YIELD_EVERY == 0:
                await anyio.sleep(0)
            group = group_of(watch.app)
            now = current.get(group)
            if now is None:
                now = current[group] = tools.fingerprint(self._host.capabilities(watch.app))
            if now == watch.seen:
                continue
            watch.seen = now
            try:
                await watch.connection.outbound.notify("notifications/tools/list_changed", None)
                notified += 1
            except Exception as exc:  # noqa: BLE001 - a session that went away stops being watched
                log.debug("tools/list_changed not delivered (%s); unwatching", exc)
                self._watched.pop(key, None)
        return notified + await self._tell_listeners(current)

    def _learn(self, app: CallerApp) -> None:
        """The list a group's listeners are told changes of is the one of the moment its first listener came: a
        change between that moment and the watch's next pass (an agent registering within two seconds of a
        listen) is a change to tell, not the baseline (it was, and that listener never heard of it)."""
        self._heard.setdefault(group_of(app), tools.fingerprint(self._host.capabilities(app)))

    async def _tell_listeners(self, current: dict[Group, tuple[tuple[str, str, str, str], ...]]) -> int:
        """Publish ToolsListChanged on the bus of each listened group whose tool list changed since the last pass
        (2026-07-28 `subscriptions/listen`); the number of groups told."""
        told = 0
        for group, (app, bus) in self.listen.buses().items():
            now = current.get(group)
            if now is None:
                now = current[group] = tools.fingerprint(self._host.capabilities(app))
            before = self._heard.get(group)
            self._heard[group] = now
            if before is not None and before != now:
                await bus.publish(ToolsListChanged())
                told += 1
        return told

    async def run(self) -> None:
        while True:
            await anyio.sleep(self.every_s)
            await self.check()


Group = tuple[str, tuple[str, ...]]
"""Who sees the same tool list: (tenant, the app's capability allow-list)."""


def group_of(app: CallerApp) -> Group:
    return app.tenant, tuple(app.capabilities)


class AppListen:
    """`subscriptions/listen` (2026-07-28) per app group: the SDK's ListenHandler over one bus per group, so a tool
    list change is told only to the listeners whose list changed (another tenant's change is not theirs to hear).
    Served, it also makes `server/discover` advertise `tools.listChanged: true`."""

    def __init__(self, *, max_per_group: int = 256) -> None:
        self._max = max_per_group
        self._groups: dict[Group, tuple[CallerApp, InMemorySubscriptionBus, ListenHandler]] = {}
        self.on_new_group: Callable[[CallerApp], None] | None = None  # the watch learns the group's list then

    def buses(self) -> dict[Group, tuple[CallerApp, InMemorySubscriptionBus]]:
        """Each listened group's bus, with an app of it (whose tool list is the group's)."""
        return {group: (app, bus) for group, (app, bus, _handler) in self._groups.items()}

    async def __call__(self, ctx: ServerRequestContext[Any, Any],
                       params: types.SubscriptionsListenRequestParams) -> types.SubscriptionsListenResult:
        return await self._handler(caller(ctx))(ctx, params)

    def bus_for(self, app: CallerApp) -> InMemorySubscriptionBus:
        """The bus the listeners of `app`'s group hear on (made on first use)."""
        self._handler(app)
        return self._groups[group_of(app)][1]

    def _handler(self, app: CallerApp) -> ListenHandler:
        group = group_of(app)
        if group not in self._groups:
            bus = InMemorySubscriptionBus()
            self._groups[group] = (app, bus, ListenHandler(bus, max_subscriptions=self._max, max_buffered_events=16))
            if self.on_new_group is not None:
                self.on_new_group(app)
        return self._groups[group][2]


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


ToolAnswer = types.CallToolResult | types.InputRequiredResult | tasks.CreateTaskResult


_T = TypeVar("_T")
Ask = Callable[[types.ElicitRequestFormParams], Awaitable[types.ElicitResult]]
"""Puts a question to the client in the call's session (elicitation/create, the handshake era); its answer."""
MAX_ASKED = 16  # questions one call puts to its client in session before it ends as a tool error


async def call(host: Host, app: CallerApp, params: types.CallToolRequestParams, *,
               seal: tasks.TaskSeal | None = None, ask: Ask | None = None,
               modern: bool = True) -> ToolAnswer:
    """One tool call through the door; the result, or a tool error with the door's or the receipt's reason. A
    call cancelled by the client (notifications/cancelled) cancels the message. A capability that asks a question
    (INPUT_REQUIRED) answers with the 2026-07-28 Multi Round-Trip pattern (reach.mcp.rounds): an InputRequiredResult
    whose elicitation carries the question; the client's retry with the answer continues the same message. With
    `seal` (the client declared the Tasks extension), a call that has not ended within `host.tasks.after_s` answers
    a task handle instead (reach.mcp.tasks); the message goes on, and tasks/get reads it. On the handshake era
    (`modern` False) a question goes to `ask` (the client's elicitation, in the call's session) and its answer
    continues the message, up to MAX_ASKED times; without `ask` it is a tool error naming
    `POST /v1/messages/{id}:input`."""
    created_ms = tasks.now_ms()
    cap = tools.newest(host.capabilities(app)).get(params.name)
    if cap is None:
        return tools.unknown(params.name)
    try:
        if params.request_state is not None:  # a retry with the answer to the question the first round asked
            message_id, wrapped = rounds.asked(params.request_state, host.sealer, app.app_id)
            answer = rounds.answer_of(params.input_responses, wrapped=wrapped)
            pending = await host.answer(app, message_id, answer)
        else:
            pending = await host.send(app, capability=cap.name, payload=tools.payload_of(cap, params.arguments),
                                      idempotency_key=_idempotency_key(params))
    except rounds.BadRound as exc:
        raise MCPError(types.INVALID_PARAMS, str(exc)) from None
    except Refused as refusal:
        return tools.refused(refusal)
    except InfraUnavailable:
        return tools.error("unavailable: the bus did not answer; retry in a few seconds")
    wait_s = host.call_timeout_s if seal is None else min(host.tasks.after_s, host.call_timeout_s)
    try:
        ended = await pending.ended(wait_s)
    except Refused as refusal:  # a repeated idempotency key's wait refused (the app holds all its wait slots)
        return tools.refused(refusal)
    except anyio.get_cancelled_exc_class():  # the client cancelled the call (or its session ended)
        pending.forget()
        with anyio.CancelScope(shield=True), contextlib.suppress(Exception):
            await host.cancel(app, pending.message_id)
        raise
    if ended.status == PENDING and seal is not None:  # a long call: the client polls the task from here on
        pending.forget()
        return tasks.created(seal.task_id(app.app_id, pending.message_id, created_ms), "working", created_ms,
                             host.tasks, f"{pending.message_id} runs; poll tasks/get")
    if ended.status == "INPUT_REQUIRED" and ended.question is not None and modern:
        return rounds.sealed(rounds.input_required(ended), host.sealer, app.app_id)
    asked = 0
    while ask is not None and asked < MAX_ASKED and ended.status == "INPUT_REQUIRED" and ended.question is not None:
        ended = await _asked_in_session(host, app, ended, ask)
        asked += 1
    return tools.result_of(ended)


async def _asked_in_session(host: Host, app: CallerApp, ended: Ended, ask: Ask) -> Ended:
    """The question as the client's elicitation; its accepted answer continues the message (the same use case as
    `POST /v1/messages/{id}:input`), and the next ending is returned. A declined answer, or one the door refuses,
    ends the call as a tool error saying why (the message still waits for an answer)."""
    required = rounds.input_required(ended)
    [asked] = (required.input_requests or {}).values()
    assert isinstance(asked, types.ElicitRequest) and isinstance(asked.params, types.ElicitRequestFormParams)
    message_id, wrapped = rounds.asked(required.request_state or "")
    try:
        answer = rounds.answer_of({rounds.KEY: await ask(asked.params)}, wrapped=wrapped)
        pending = await host.answer(app, message_id, answer)
    except rounds.BadRound as exc:
        return dataclasses.replace(ended, status="INPUT_REQUIRED", question=None,
                                   reason=f"{message_id} asks: {ended.question} ({exc})")
    except Refused as refusal:
        hint = f" ({refusal.hint})" if refusal.hint else ""
        return dataclasses.replace(ended, status="INPUT_REQUIRED", question=None,
                                   reason=f"{refusal.error}: {refusal.message}{hint}")
    try:
        return await pending.ended(host.call_timeout_s)
    except anyio.get_cancelled_exc_class():
        pending.forget()
        with anyio.CancelScope(shield=True), contextlib.suppress(Exception):
            await host.cancel(app, message_id)
        raise


def session_ask(ctx: ServerRequestContext[Any, Any]) -> Ask | None:
    """The handshake era's elicitation in the call's session, when the client declared it (2025-06-18 and later);
    None otherwise."""
    session = ctx.session
    wanted = types.ClientCapabilities(elicitation=types.ElicitationCapability())
    if ctx.protocol_version in MODERN_PROTOCOL_VERSIONS or not session.check_client_capability(wanted):
        return None

    async def ask(params: types.ElicitRequestFormParams) -> types.ElicitResult:
        return await session.elicit_form(params.message, params.requested_schema, related_request_id=ctx.request_id)

    return ask


def declares_tasks(ctx: ServerRequestContext[Any, Any]) -> bool:
    """Whether this request's client declared the Tasks extension (2026-07-28 only: a task handle is never sent
    to a client that did not declare it on the request)."""
    if ctx.protocol_version not in MODERN_PROTOCOL_VERSIONS:
        return False
    capabilities = getattr(ctx.session, "client_capabilities", None)
    return bool(capabilities is not None and capabilities.extensions and tasks.EXTENSION in capabilities.extensions)


class TaskMethods:
    """`tasks/get`, `tasks/update`, `tasks/cancel` (the Tasks extension, 2026-07-28): each request names its task
    by the id `call` sealed for its app; a task id that does not open for the calling app (another app's, forged),
    or older than the task's ttl (the status retention), is "Task not found", exactly as an unknown one. Each
    request takes a read token of the app."""

    def __init__(self, host: Host, seal: tasks.TaskSeal) -> None:
        self._host = host
        self.seal = seal

    async def _task(self, ctx: ServerRequestContext[Any, Any], task_id: str) -> tuple[CallerApp, str, int]:
        if ctx.protocol_version not in MODERN_PROTOCOL_VERSIONS:
            raise MCPError(types.METHOD_NOT_FOUND, "Method not found", data=ctx.method)
        require_client_extension(ctx, tasks.EXTENSION)
        request = ctx.request
        headers = getattr(request, "headers", None)
        if headers is not None and decode_header_value(headers.get(MCP_NAME_HEADER)) != task_id:
            raise MCPError(types.HEADER_MISMATCH, f"{MCP_NAME_HEADER} header does not match the request body's "
                           "'taskId' parameter (the Tasks extension routes by it)")
        app = caller(ctx)
        opened = self.seal.opened(app.app_id, task_id)
        ttl_ms = self._host.tasks.ttl_ms
        if opened is None or (ttl_ms is not None and tasks.now_ms() - opened[1] > ttl_ms):  # past its row's life
            raise MCPError(types.INVALID_PARAMS, "Failed to retrieve task: Task not found")
        try:
            await self._host.read(app)
        except Refused as refusal:
            raise MCPError(QUOTA_ERROR, f"{refusal.error}: {refusal.message}") from None
        return app, opened[0], opened[1]

    async def _now(self, app: CallerApp, message_id: str) -> Ended | None:
        try:
            return await self._host.look(app, message_id)
        except InfraUnavailable:
            raise MCPError(types.INTERNAL_ERROR, "unavailable: the status table did not answer; retry") from None

    async def get(self, ctx: ServerRequestContext[Any, Any], params: tasks.TaskParams) -> tasks.GetTaskResult:
        return await _guarded(ctx, self._get(ctx, params))

    async def update(self, ctx: ServerRequestContext[Any, Any], params: tasks.UpdateTaskParams) -> tasks.Acknowledged:
        return await _guarded(ctx, self._update(ctx, params))

    async def cancel(self, ctx: ServerRequestContext[Any, Any], params: tasks.TaskParams) -> tasks.Acknowledged:
        return await _guarded(ctx, self._cancel(ctx, params))

    async def _get(self, ctx: ServerRequestContext[Any, Any], params: tasks.TaskParams) -> tasks.GetTaskResult:
        app, message_id, created_ms = await self._task(ctx, params.task_id)
        return tasks.detailed(params.task_id, await self._now(app, message_id), created_ms, self._host.tasks)

    async def _update(self, ctx: ServerRequestContext[Any, Any],
                      params: tasks.UpdateTaskParams) -> tasks.Acknowledged:
        """The answer to the question the task asks now (as `POST /v1/messages/{id}:input`: the schema, words, the
        app's tenant); responses to no outstanding question are ignored, as the extension says."""
        app, message_id, _ = await self._task(ctx, params.task_id)
        ended = await self._now(app, message_id)
        try:
            answer = None if ended is None else tasks.answer_of(ended, params.input_responses)
            if ended is not None and answer is not None:
                (await self._host.answer(app, ended.message_id, answer)).forget()  # tasks/get reads the next turn
        except rounds.BadRound as exc:
            raise MCPError(types.INVALID_PARAMS, str(exc)) from None
        except Refused as refusal:
            hint = f" ({refusal.hint})" if refusal.hint else ""
            raise MCPError(types.INVALID_PARAMS, f"{refusal.error}: {refusal.message}{hint}") from None
        return tasks.Acknowledged()

    async def _cancel(self, ctx: ServerRequestContext[Any, Any], params: tasks.TaskParams) -> tasks.Acknowledged:
        """The cancel record of the chain's current message (cooperative: a running handler sees ctx.cancelled, one
        not started is skipped; a task that already ended stays as it ended)."""
        app, message_id, _ = await self._task(ctx, params.task_id)
        ended = await self._now(app, message_id)
        try:
            await self._host.cancel(app, ended.message_id if ended is not None else message_id)
        except Refused as refusal:
            raise MCPError(types.INTERNAL_ERROR, f"{refusal.error}: {refusal.message}") from None
        return tasks.Acknowledged()

    def bind(self, server: Server[Any]) -> None:
        server.add_request_handler("tasks/get", tasks.TaskParams, self.get)
        server.add_request_handler("tasks/update", tasks.UpdateTaskParams, self.update)
        server.add_request_handler("tasks/cancel", tasks.TaskParams, self.cancel)
        server.extensions[tasks.EXTENSION] = {}


async def _guarded(ctx: ServerRequestContext[Any, Any], work: Awaitable[_T]) -> _T:
    """A `tasks/*` request's answer; anything but an MCPError is logged and answered as an internal error that
    tells the caller nothing of the internals (as `tools/call` does)."""
    try:
        return await work
    except MCPError:
        raise
    except Exception:  # noqa: BLE001 - the log has it; the caller learns nothing of the internals
        log.exception("%s failed", ctx.method)
        raise MCPError(types.INTERNAL_ERROR, "internal_error: the request could not be completed; retry, or ask "
                       "an operator") from None


def build_server(host: Host, watch: ToolWatch, seal: tasks.TaskSeal | None = None) -> ReachServer:
    seal = seal or tasks.TaskSeal(host.sealer)

    async def list_tools(ctx: ServerRequestContext[Any, Any],
                         params: types.PaginatedRequestParams | None) -> types.ListToolsResult:
        app = caller(ctx)
        try:  # a read, metered like the /v1 ones
            await host.read(app)
        except Refused as refusal:
            raise MCPError(QUOTA_ERROR, f"{refusal.error}: {refusal.message}") from None
        caps = host.capabilities(app)
        watch.watch(ctx, app, tools.fingerprint(caps))
        return types.ListToolsResult(tools=tools.tools(caps))

    async def call_tool(ctx: ServerRequestContext[Any, Any], params: types.CallToolRequestParams) -> ToolAnswer:
        app = caller(ctx)
        try:
            modern = ctx.protocol_version in MODERN_PROTOCOL_VERSIONS
            return await call(host, app, params, seal=seal if declares_tasks(ctx) else None, ask=session_ask(ctx),
                              modern=modern)
        except MCPError:
            raise
        except Exception:  # noqa: BLE001 - the log has it; the caller learns nothing of the internals
            log.exception("tools/call %s of %s failed", params.name[:200], app.app_id)
            return tools.error("internal_error: the call could not be completed; retry, or ask an operator")

    @contextlib.asynccontextmanager
    async def lifespan(_server: Server[Any]) -> AsyncIterator[dict[str, Any]]:
        async with anyio.create_task_group() as group:
            group.start_soon(watch.run)
            yield {}
            group.cancel_scope.cancel()

    # the SDK types on_call_tool as the core results; an extension's claimed result (a task handle) passes its
    # serializer untouched on 2026-07-28 (resultType outside the core vocabulary)
    server = ReachServer(SERVER_NAME, version="1", lifespan=lifespan, on_list_tools=list_tools,
                         on_call_tool=call_tool, on_subscriptions_listen=watch.listen,  # type: ignore[arg-type]
                         cache_hints={"tools/list": CacheHint(ttl_ms=int(watch.every_s * 1000), scope="private")},
                         instructions="Agent-Reach capabilities as tools: each call is one message on the bus, "
                                      "with receipts, retries and routing; its result is the tool's structured "
                                      "content.")
    TaskMethods(host, seal).bind(server)
    return server


def _refused(status: int, error: str, message: str, hint: str,
             headers: dict[str, str] | None = None) -> JSONResponse:
    return JSONResponse({"error": error, "message": message, "hint": hint}, status_code=status, headers=headers)


def challenge(metadata_url: str, failure: AuthFailure | None = None) -> str:
    """`WWW-Authenticate` of a 401 (RFC 6750, RFC 9728 section 5.1): where the protected resource metadata is, and
    `invalid_token` when a token was sent and refused."""
    value = f'Bearer realm="agent-reach", resource_metadata="{metadata_url}"'
    if failure is not None and failure.code not in ("missing", None):
        value += ', error="invalid_token"'
    return value


class SessionManager(StreamableHTTPSessionManager):
    """The SDK's session manager, with sessions counted per app: a new one is refused (503, as the SDK's own cap)
    when its app holds `per_app` already, decided under the SDK's session lock so two opening requests at once
    cannot both pass."""

    def __init__(self, *, per_app: int, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.per_app = per_app

    def held(self, app_id: str) -> int:
        """The sessions `app_id` holds open on this replica (the SDK keeps each session's owner)."""
        return sum(1 for owner in self._session_owners.values() if owner["client_id"] == app_id)

    def _admit_session(self, requestor: Any) -> Any:
        if requestor is not None and self.held(requestor["client_id"]) >= self.per_app:
            return None
        return super()._admit_session(requestor)


class McpEndpoint:
    """The ASGI app at /mcp: the Origin, the token, the app's session and read quota, then the SDK's streamable HTTP
    session manager. `run()` must be entered for the app's lifetime (the gateway's lifespan does)."""

    def __init__(self, host: Host, *, watch_s: float = WATCH_S, limits: SessionLimits | None = None) -> None:
        self.host = host
        limits = limits or host.limits
        self.watch = ToolWatch(host, watch_s)
        self.server = build_server(host, self.watch)
        self.manager = SessionManager(app=self.server, max_request_body_size=host.max_body_bytes,
                                      session_idle_timeout=limits.idle_s, max_sessions=limits.total,
                                      per_app=limits.per_app)

    @contextlib.asynccontextmanager
    async def run(self) -> AsyncIterator[None]:
        async with self.manager.run():
            yield

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return
        response = await self._admit(scope)
        if response is not None:
            await response(scope, receive, send)
            return
        await self.manager.handle_request(scope, receive, send)

    async def _admit(self, scope: Scope) -> JSONResponse | None:
        """None when the request may reach the SDK (the scope then names its app); else the refusal."""
        headers = {k.decode("latin-1"): v.decode("latin-1") for k, v in scope["headers"] if k in _ASKED}
        origin = headers.get("origin")
        if origin is not None and origin.rstrip("/") not in self.host.origins(scope):
            return _refused(403, "forbidden_origin", f"a browser page of {origin[:200]} may not call this MCP "
                            "server", "call it from the gateway's own origin or one in REACH_GATEWAY_MCP_ORIGINS")
        try:
            outcome = self.host.authenticate(headers.get("authorization"))
        except InfraUnavailable as exc:
            return _refused(503, "unavailable", str(exc), "retry in a few seconds", {"Retry-After": "1"})
        if isinstance(outcome, AuthFailure):
            return _refused(401, outcome.code or "unauthorized", outcome.reason,
                            "send Authorization: Bearer <key_id>.rat_<hex> of a gateway app key (the a2a_token "
                            "`reach apps create` prints)",
                            {"WWW-Authenticate": challenge(self.host.resource_metadata(scope), outcome)})
        scope[APP] = outcome
        scope.setdefault("state", {})["app_id"] = outcome.app_id  # the request metrics label by it
        # the SDK binds a session to the principal that opened it: another app's requests get 404 for its id
        scope["user"] = AuthenticatedUser(AccessToken(token="", client_id=outcome.app_id, scopes=[]))
        opening = scope["method"] == "POST" and "mcp-session-id" not in headers
        try:
            if opening:
                self.host.open_session(outcome, self.manager.held(outcome.app_id))
            if opening or scope["method"] == "GET":  # a session or a notification stream: a read each
                await self.host.read(outcome)
        except Refused as refusal:
            return _refused(refusal.status, refusal.error, refusal.message, refusal.hint or "", refusal.headers)
        return None


_ASKED = (b"origin", b"authorization", b"mcp-session-id")
