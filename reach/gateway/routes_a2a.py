"""A2A at the gateway: `/.well-known/agent-card.json` and `/a2a/` (the mesh), `/a2a/cap/<capability>/` and its
card (one capability), JSON-RPC answered by the SDK's dispatcher over reach.a2a.handler (docs/a2a.md); and
`POST /v1/messages/{id}:cancel`, the signed /v1 way to the same cancel record."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping
from contextlib import AbstractContextManager
from typing import Any

from a2a.server.context import ServerCallContext
from a2a.server.request_handlers.response_helpers import agent_card_to_dict
from a2a.server.routes import DefaultServerCallContextBuilder
from a2a.server.routes.jsonrpc_dispatcher import JsonRpcDispatcher
from a2a.types.a2a_pb2 import AgentCard
from fastapi import APIRouter
from pydantic import BaseModel
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import BaseRoute, Match, Route
from starlette.types import Message, Receive, Scope

from reach.a2a import cards
from reach.a2a.bearer import BearerAuthenticator
from reach.a2a.handler import APP, CAPABILITY, Cancel, ReachRequestHandler
from reach.a2a.ports import Refused, Row, Sent
from reach.a2a.pushbook import MemoryPushBook
from reach.a2a.pushsender import PushCollector
from reach.callers import AppDirectory, AuthFailure, CallerApp
from reach.cancels import CancelRecord
from reach.core.turns import AnswerRefused
from reach.errors import InfraUnavailable, InvalidName
from reach.gateway import checks
from reach.gateway.bodies import CancelRequest, EnvelopeRequest, ErrorBody, Routing
from reach.gateway.events import find_row, is_terminal
from reach.gateway.gate import Slots
from reach.gateway.intake import Admission, Admitted, source_of, status_url, unavailable_as_503
from reach.gateway.openapi import READ_ERRORS, request_body
from reach.gateway.routes_envelopes import read_limited, signed
from reach.gateway.routes_status import owned
from reach.names import check_capability
from reach.ops import turns

CARD = "/.well-known/agent-card.json"
MAX_CANCEL_BODY = 4096  # {"message_id": ...}, and room for a reason
_CARD_HEADERS = {"Cache-Control": "no-cache"}  # cards follow registrations: revalidate every time


class CancelSent(BaseModel):
    """The cancel record is on the bus; `status_url` shows how the message ends."""

    message_id: str
    cancel: str = "sent"
    status_url: str


CANCEL_RESPONSES: dict[int | str, dict[str, Any]] = {
    **READ_ERRORS, 400: {"model": ErrorBody, "description": "the body is not JSON naming this message, or "
                                                        "Content-Length is not a number"},
    408: {"model": ErrorBody, "description": "the body did not arrive in time"},
    409: {"model": ErrorBody, "description": "the message already ended: nothing to cancel"},
    413: {"model": ErrorBody, "description": "a body over 4 KiB"}}


class LabelledRoute(Route):
    """A Starlette route that names itself in the scope, as FastAPI's do: the request metrics label by it."""

    def matches(self, scope: Scope) -> tuple[Match, Scope]:
        match, child = super().matches(scope)
        if match is not Match.NONE:
            child = {**child, "route": self}
        return match, child


class ReachContextBuilder(DefaultServerCallContextBuilder):
    """The SDK's context plus what the route learned: the calling app and the endpoint's capability."""

    def build(self, request: Request) -> ServerCallContext:
        context = super().build(request)
        context.state[APP] = request.scope.get(APP)
        context.state[CAPABILITY] = request.path_params.get("capability")
        return context


class AdmissionHost:
    """reach.a2a.ports.Host over the gateway's admission, its status views and its HTTP settings."""

    def __init__(self, admission: Admission) -> None:
        self._admission = admission

    @property
    def invoke_timeout_s(self) -> float:
        return self._admission.settings.invoke_timeout_ms / 1000

    @property
    def poll_s(self) -> float:
        return self._admission.settings.sse_poll

    @property
    def find_s(self) -> float:
        return self._admission.settings.sse_find

    @property
    def stream_max_s(self) -> float:
        return self._admission.settings.sse_max

    async def submit(self, app: CallerApp, *, capability: str, payload: Any, idempotency_key: str | None,
                     context_id: str | None, version: str = "*", max_tokens: int | None = None,
                     max_cost: float | None = None) -> Sent:
        try:
            request = EnvelopeRequest(capability=capability, payload=payload, idempotency_key=idempotency_key,
                                      routing=Routing(session_key=context_id), version=version,
                                      max_tokens=max_tokens, max_cost=max_cost)
            admitted = await self._admission.admit(app, request)
            if context_id is not None:  # the A2A context is the trace: get-task and /v1/traces/<context> find it
                admitted = Admitted(admitted.app, admitted.envelope.model_copy(update={"trace_id": context_id}),
                                    admitted.idempotency_key)
            accepted = await self._admission.publish(admitted)
        except checks.Refusal as refusal:
            raise Refused(refusal.status, refusal.body.error, refusal.body.message, refusal.headers) from None
        return Sent(message_id=accepted.message_id, trace_id=accepted.trace_id)

    async def answer(self, app: CallerApp, task_id: str, payload: Any) -> Sent:
        store = self._admission.deps.turns
        if store is None:
            raise Refused(503, "unavailable", "this gateway does not take answers")
        try:
            await self._admission.take_read(app)
            with unavailable_as_503():
                taken = await turns.answer(task_id, payload, tenant=app.tenant,
                                           rows=self._admission.deps.status.message, store=store,
                                           now_ms=self._admission.deps.clock_ms(),
                                           authorize=lambda capability: self._admission.authorize_answer(
                                               app, capability))
        except checks.Refusal as refusal:
            raise Refused(refusal.status, refusal.body.error, refusal.body.message, refusal.headers) from None
        except AnswerRefused as refused:
            raise Refused(refused.status, refused.code, "; ".join(filter(None, (refused.message, refused.hint)))) \
                from None
        code, row = await self._admission.deps.status.message(task_id)
        return Sent(message_id=task_id, trace_id=str(row.get("trace_id", "")) if code == 200 else "",
                    generation=taken.generation)

    async def message(self, message_id: str) -> Row:
        return await self._admission.deps.status.message(message_id)

    async def trace(self, trace_id: str) -> Row:
        return await self._admission.deps.status.trace(trace_id)

    async def tasks(self, app: CallerApp, query: Mapping[str, str]) -> Row:
        return await self._admission.deps.status.tenant_tasks(app.tenant, query)

    async def row(self, app: CallerApp, message_id: str) -> Row:
        return owned(app, message_id, *await self._admission.deps.status.message(message_id))

    async def take_read(self, app: CallerApp, rows: int = 1) -> None:
        try:
            await self._admission.take_read(app, rows)
        except checks.Refusal as refusal:
            raise Refused(refusal.status, refusal.body.error, refusal.body.message, refusal.headers) from None

    async def admit_push(self, app: CallerApp) -> None:
        try:
            await self._admission.gate.push(app)
        except checks.Refusal as refusal:
            raise Refused(refusal.status, refusal.body.error, refusal.body.message, refusal.headers) from None

    def stream(self, app: CallerApp) -> AbstractContextManager[None]:
        return _held(self._admission.gate.streams, app)

    def wait(self, app: CallerApp) -> AbstractContextManager[None]:
        return _held(self._admission.gate.waits, app)

    async def find(self, app: CallerApp, message_id: str) -> Row:
        try:  # GetTask and SubscribeToTask: reads, metered like the /v1 ones
            await self._admission.take_read(app)
        except checks.Refusal as refusal:
            raise Refused(refusal.status, refusal.body.error, refusal.body.message, refusal.headers) from None
        return owned(app, message_id, *await find_row(self._admission.deps.status, message_id,
                                                      wait_s=self.find_s, poll_s=self.poll_s))


@contextlib.contextmanager
def _held(slots: Slots, app: CallerApp) -> Iterator[None]:
    """One of the app's slots (reach.gateway.gate) while the block runs; Refused 429 when it holds them all."""
    try:
        slots.take(app)
    except checks.Refusal as refusal:
        raise Refused(refusal.status, refusal.body.error, refusal.body.message, refusal.headers) from None
    try:
        yield
    finally:
        slots.give_back(app)


def _unauthenticated(failure: AuthFailure) -> JSONResponse:
    """401 + WWW-Authenticate: Bearer, what A2A clients expect before any JSON-RPC (the SDK raises A2AClientError
    `HTTP Error 401`)."""
    return JSONResponse({"error": failure.code, "message": failure.reason,
                         "hint": "send Authorization: Bearer <key_id>.rat_<hex>, the A2A token `reach apps create` "
                                 "printed"},
                        status_code=401, headers={"WWW-Authenticate": 'Bearer realm="agent-reach"'})


def _sender(admission: Admission) -> Cancel | None:
    """Produce the app's cancel record (tenant-scoped: agents honour it only for that tenant's message)."""
    sink = admission.deps.cancels
    if sink is None:
        return None

    async def send(app: CallerApp, message_id: str) -> None:
        record = CancelRecord(message_id=message_id, tenant=app.tenant, by=source_of(app),
                              at=admission.deps.clock_ms())
        with unavailable_as_503():
            await sink.cancel(record)

    return send


def cancel_routes(admission: Admission) -> APIRouter:
    router = APIRouter(tags=["status"])
    send = _sender(admission)

    @router.post("/v1/messages/{message_id}:cancel", status_code=202, response_model=CancelSent,
                 responses=CANCEL_RESPONSES, openapi_extra=request_body(CancelRequest),
                 summary="Cancel one message")
    async def cancel(message_id: str, request: Request) -> JSONResponse:
        """202 once the cancel record is on the bus: an agent that has not started the message skips it
        (CANCELED), a running handler sees ctx.cancelled; 409 when the message already ended. The signed body
        names the message (`{"message_id": ...}`): a v1 signature (REACH_GATEWAY_ACCEPT_V1) covers the body, not
        the path, so an empty body would let another request's signature cancel any message of the tenant."""
        app, document = await signed(request, admission, MAX_CANCEL_BODY)
        if not isinstance(document, dict) or set(document) != {"message_id"} or document["message_id"] != message_id:
            raise checks.Refusal(400, "bad_request", "the signed body must name the message it cancels, and only it: "
                                 f'{{"message_id": "{message_id}"}}', "sign that body and send it")
        await admission.take_read(app)  # it reads the row first, as GetTask would (reach.gateway.gate)
        code, row = owned(app, message_id, *await admission.deps.status.message(message_id))
        if code != 200:
            return JSONResponse({"error": row.get("error", "unavailable"), "message": row.get("message", ""),
                                 "hint": row.get("hint")}, status_code=code)
        if is_terminal(row):
            return JSONResponse({"error": "terminal", "message": f"{message_id} already ended {row['status']}",
                                 "hint": "nothing to cancel"}, status_code=409)
        if send is None:
            raise checks.Refusal(503, "unavailable", "this gateway has no cancels topic")
        await send(app, message_id)
        return JSONResponse(CancelSent(message_id=message_id, status_url=status_url(message_id)).model_dump(),
                            status_code=202)

    return router


def _replay(raw: bytes) -> Receive:
    """A receive channel that hands the already-read body to the SDK's dispatcher."""
    async def receive() -> Message:
        return {"type": "http.request", "body": raw, "more_body": False}
    return receive


def socket_url(scope: Scope) -> str:
    """The gateway's own address as the server saw the connection arrive (scope["server"], from the socket):
    a card never advertises what a caller's Host header claims, which would let any caller point it elsewhere."""
    host, port = scope.get("server") or ("127.0.0.1", None)
    host = f"[{host}]" if ":" in host else host
    return f"http://{host}:{port}/" if port else f"http://{host}/"


def a2a_routes(admission: Admission, directory: AppDirectory | None) -> list[BaseRoute]:
    """The A2A endpoints; without an apps directory (no door) every call is refused 503."""
    bearer = BearerAuthenticator(directory) if directory is not None else None
    push, bus = admission.deps.push, admission.deps.namespace
    if isinstance(push, MemoryPushBook):  # the push sender's counters on this gateway's /metrics
        admission.metrics.registry.register(PushCollector(push))
    dispatcher = JsonRpcDispatcher(ReachRequestHandler(AdmissionHost(admission), cancel=_sender(admission), push=push),
                                   context_builder=ReachContextBuilder())
    catalog = admission.deps.catalog

    async def rpc(request: Request) -> Response:
        if bearer is None:
            return JSONResponse({"error": "unavailable", "message": "this gateway has no apps directory"},
                                status_code=503)
        capability = request.path_params.get("capability")
        if capability is not None:
            try:
                check_capability(capability)
            except InvalidName as exc:
                return JSONResponse({"error": "bad_request", "message": str(exc)}, status_code=400)
        try:
            outcome = bearer.authenticate(request.headers.get("authorization"))
        except InfraUnavailable as exc:
            return JSONResponse({"error": "unavailable", "message": str(exc)}, status_code=503,
                                headers={"Retry-After": "1"})
        if isinstance(outcome, AuthFailure):
            return _unauthenticated(outcome)
        request.scope[APP] = outcome
        request.state.app_id = outcome.app_id
        try:  # the /v1 limits, before the SDK reads and parses the body whole (issue 28, finding 8)
            raw = await read_limited(request, admission.settings.max_body_bytes, admission.settings.body_timeout)
        except checks.Refusal as exc:
            return JSONResponse(exc.body.model_dump(), status_code=exc.status, headers=exc.headers)
        return await dispatcher.handle_requests(Request(request.scope, _replay(raw)))

    def _served(card: AgentCard | None) -> Response:
        if card is None:
            return JSONResponse({"error": "not_found", "message": "no live instance serves that capability",
                                 "hint": "see the mesh card at /.well-known/agent-card.json"}, status_code=404)
        return JSONResponse(agent_card_to_dict(card), headers=_CARD_HEADERS)

    def base_url(request: Request) -> str:
        return admission.settings.public_url or socket_url(request.scope)

    async def mesh_card(request: Request) -> Response:
        now = admission.deps.clock_ms()
        return _served(cards.mesh_card(base_url(request), catalog.live_capabilities(None, now), push=push is not None,
                                       bus=bus, depends=catalog.dependencies(now)))

    async def capability_card(request: Request) -> Response:
        now = admission.deps.clock_ms()
        return _served(cards.capability_card(base_url(request), request.path_params["capability"],
                                             catalog.live_capabilities(None, now), push=push is not None, bus=bus,
                                             depends=catalog.dependencies(now)))

    return [LabelledRoute(CARD, mesh_card, methods=["GET"]), LabelledRoute(cards.MESH_PATH, rpc, methods=["POST"]),
            LabelledRoute(cards.CAPABILITY_PATH, rpc, methods=["POST"]),
            LabelledRoute(cards.CAPABILITY_PATH + CARD.lstrip("/"), capability_card, methods=["GET"])]
