"""MCP at the gateway: `/mcp`, streamable HTTP (reach.mcp.server.McpEndpoint, docs/mcp.md), over the port
reach.mcp.ports.Host that `AdmissionHost` implements here with the door of `POST /v1/invoke` and the gateway's
admission (reach.gateway.gate); and `/.well-known/oauth-protected-resource` (RFC 9728), the protected resource
metadata the MCP authorization specification asks of a server."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any
from urllib.parse import urlsplit

from cryptography.fernet import Fernet
from pydantic import SecretStr
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import BaseRoute
from starlette.types import Scope

from reach.a2a.bearer import BearerAuthenticator
from reach.callers import AppDirectory, AuthFailure, CallerApp
from reach.core.turns import AnswerRefused
from reach.errors import InfraUnavailable
from reach.gateway import answers, checks
from reach.gateway.bodies import Accepted, InvokeAnswer, InvokeRequest
from reach.gateway.deps import Waiter
from reach.gateway.events import fallback_child, find_row, is_terminal
from reach.gateway.intake import Admission, status_url, unavailable_as_503
from reach.gateway.routes_a2a import LabelledRoute, _sender, socket_url
from reach.gateway.routes_envelopes import _from_status
from reach.invoke import MAX_CHAIN
from reach.mcp.ports import PENDING, Ended, Pending, Refused, SessionLimits
from reach.mcp.server import McpEndpoint
from reach.mcp.tasks import Sealer, TaskSettings
from reach.ops import turns
from reach.records import Capability
from reach.secretbox import SecretBox

PATH = "/mcp"
METADATA = "/.well-known/oauth-protected-resource"  # RFC 9728; also at METADATA + PATH (the path-suffixed form)


def _ended(answer: InvokeAnswer) -> Ended:
    return Ended(message_id=answer.message_id, trace_id=answer.trace_id, status=answer.status, result=answer.result,
                 reason=answer.message, hint=answer.hint)


class _Reply:
    """Waits on the gateway's reply topic, as /v1/invoke does."""

    def __init__(self, waiter: Waiter, accepted: Accepted) -> None:
        self._waiter = waiter
        self._accepted = accepted
        self.message_id = accepted.message_id

    async def ended(self, timeout_s: float) -> Ended:
        receipt = await self._waiter.result(timeout_s)
        if receipt is None:
            return Ended(self.message_id, self._accepted.trace_id, PENDING)
        ended = _ended(answers.from_endings(self._waiter.endings)[1])
        if receipt.input is not None:  # INPUT_REQUIRED: the question and its schema, for the Multi Round-Trip
            return dataclasses.replace(ended, question=receipt.input.question,
                                       answer_schema=receipt.input.answer_schema)
        return ended

    def forget(self) -> None:
        self._waiter.cancel()


class _Row:
    """A repeated idempotency_key: its reply went to the first call, so the status table is read instead, holding
    one of the app's wait slots while it polls (as /v1/invoke does: 429 when the app holds them all)."""

    def __init__(self, admission: Admission, accepted: Accepted, app: CallerApp) -> None:
        self._admission = admission
        self._accepted = accepted
        self._app = app
        self.message_id = accepted.message_id

    async def ended(self, timeout_s: float) -> Ended:
        try:
            with self._admission.gate.waits.hold(self._app):
                found = await _from_status(self._admission, self._accepted, int(timeout_s * 1000))
        except checks.Refusal as refusal:
            raise Refused(refusal.status, refusal.body.error, f"{refusal.body.message}; the first request with "
                          f"this idempotency_key is {self.message_id}", refusal.body.hint, refusal.headers) from None
        return _ended(found[1])

    def forget(self) -> None:
        return None


def _looked(row: dict[str, Any]) -> Ended:
    """A status row as MCP reads it (a task's state): its ending as /v1/invoke answers it when terminal, else its
    status, and the question when it asks one."""
    asked = row.get("input") or {}
    ended = (_ended(answers.from_row(row)[1]) if is_terminal(row)
             else Ended(message_id=row["message_id"], trace_id=row.get("trace_id", ""), status=row["status"]))
    return dataclasses.replace(ended, generation=int(row.get("generation") or 0), updated_at=row.get("updated_at"),
                               question=asked.get("question"), answer_schema=asked.get("answer_schema"))


def _sealer(directory: AppDirectory | None) -> Sealer:
    """The gateway's secrets box (the same key on every replica, so a task id opens on any of them); a gateway
    without one (an in-memory directory) seals with a key of this process only."""
    table = getattr(directory, "table", None)
    box = getattr(table, "box", None)
    return box if isinstance(box, SecretBox) else SecretBox([SecretStr(Fernet.generate_key().decode())])


class AdmissionHost:
    """reach.mcp.ports.Host over the gateway's admission, reply topic, registry, cancels and app keys."""

    def __init__(self, admission: Admission, directory: AppDirectory | None) -> None:
        self._admission = admission
        self._bearer = BearerAuthenticator(directory) if directory is not None else None
        self._cancel = _sender(admission)
        self.sealer = _sealer(directory)
        self.tasks = TaskSettings(after_s=admission.settings.mcp_task_after_ms / 1000,
                                  poll_ms=max(int(admission.settings.sse_poll * 4000), 500),
                                  ttl_ms=retention * 1000 if (retention := admission.deps.status_retention_s)
                                  else None)

    async def look(self, app: CallerApp, message_id: str) -> Ended | None:
        status = self._admission.deps.status
        for _hop in range(MAX_CHAIN + 1):
            code, row = await find_row(status, message_id, wait_s=0, poll_s=0)
            if code == 503:  # not "not found": the client would give the task up
                raise InfraUnavailable(str(row.get("message") or "the status views do not answer"))
            if code != 200 or row.get("tenant") != app.tenant:
                return None
            child = fallback_child(row) if is_terminal(row) else None
            if child is None:
                if is_terminal(row) and row.get("fallback_pending"):
                    return Ended(message_id=message_id, trace_id=row.get("trace_id", ""), status="FALLBACK_PENDING",
                                 updated_at=row.get("updated_at"))
                return _looked(row)
            message_id = child
        return _looked(row)

    @property
    def call_timeout_s(self) -> float:
        return self._admission.settings.invoke_timeout_ms / 1000

    @property
    def max_body_bytes(self) -> int:
        return self._admission.settings.max_body_bytes

    def authenticate(self, authorization: str | None) -> CallerApp | AuthFailure:
        if self._bearer is None:
            raise InfraUnavailable("this gateway has no apps directory")
        return self._bearer.authenticate(authorization)

    def capabilities(self, app: CallerApp) -> Sequence[Capability]:
        live = self._admission.deps.catalog.live_capabilities(app.tenant, self._admission.deps.clock_ms())
        return [cap for cap in live if app.may_call(cap.name)]

    async def send(self, app: CallerApp, *, capability: str, payload: Any, idempotency_key: str | None) -> Pending:
        admission = self._admission
        replies = admission.deps.replies
        try:
            request = InvokeRequest(capability=capability, payload=payload, idempotency_key=idempotency_key)
            admitted = await admission.admit(app, request, reply_to=replies.topic,
                                             default_budget_ms=admission.settings.invoke_timeout_ms)
            waiter = replies.expect(admitted.envelope.message_id, admitted.envelope.generation)
            try:
                accepted = await admission.publish(admitted)
            except BaseException:
                waiter.cancel()
                raise
        except checks.Refusal as refusal:
            raise Refused(refusal.status, refusal.body.error, refusal.body.message, refusal.body.hint,
                          refusal.headers) from None
        if accepted.message_id != admitted.envelope.message_id:
            waiter.cancel()
            return _Row(admission, accepted, app)
        return _Reply(waiter, accepted)

    async def answer(self, app: CallerApp, message_id: str, answer: Any) -> Pending:
        admission = self._admission
        store, replies = admission.deps.turns, admission.deps.replies
        if store is None:
            raise Refused(503, "unavailable", "this gateway does not take answers", "retry in a few seconds")
        try:
            await admission.take_read(app)
            with unavailable_as_503():
                taken = await turns.answer(message_id, answer, tenant=app.tenant, rows=admission.deps.status.message,
                                           store=store, now_ms=admission.deps.clock_ms(), reply_to=replies.topic,
                                           authorize=lambda capability: admission.authorize_answer(app, capability))
        except checks.Refusal as refusal:
            raise Refused(refusal.status, refusal.body.error, refusal.body.message, refusal.body.hint,
                          refusal.headers) from None
        except AnswerRefused as refused:
            raise Refused(refused.status, refused.code, refused.message, refused.hint) from None
        # the next turn's reply may be read before this: the pump keeps it for the waiter
        return _Reply(replies.expect(message_id, taken.generation),
                      Accepted(message_id=message_id, trace_id="", status_url=status_url(message_id)))

    async def cancel(self, app: CallerApp, message_id: str) -> None:
        if self._cancel is None:
            return
        try:
            await self._cancel(app, message_id)
        except checks.Refusal as refusal:  # the cancels producer did not answer: 503, its error text never shown
            raise Refused(refusal.status, refusal.body.error, "the cancel could not be sent", refusal.body.hint,
                          refusal.headers) from None

    async def read(self, app: CallerApp) -> None:
        try:
            await self._admission.gate.read(app)
        except checks.Refusal as refusal:
            raise Refused(refusal.status, refusal.body.error, refusal.body.message, refusal.body.hint,
                          refusal.headers) from None

    def open_session(self, app: CallerApp, held: int) -> None:
        try:
            self._admission.gate.session(app, held)
        except checks.Refusal as refusal:
            raise Refused(refusal.status, refusal.body.error, refusal.body.message, refusal.body.hint,
                          refusal.headers) from None

    @property
    def limits(self) -> SessionLimits:
        settings = self._admission.settings
        return SessionLimits(per_app=settings.mcp_sessions_per_app, total=settings.mcp_sessions,
                             idle_s=settings.mcp_idle)

    def base_url(self, scope: Scope) -> str:
        """The gateway as callers reach it: REACH_GATEWAY_PUBLIC_URL, else the socket (never the Host header)."""
        return self._admission.settings.public_url or socket_url(scope)

    def origins(self, scope: Scope) -> Sequence[str]:
        settings = self._admission.settings
        own = urlsplit(self.base_url(scope))
        return (f"{own.scheme}://{own.netloc}", *settings.listed(settings.mcp_origins))

    def resource_metadata(self, scope: Scope) -> str:
        return self.base_url(scope).rstrip("/") + METADATA + PATH

    def metadata(self, scope: Scope) -> dict[str, Any]:
        """The protected resource metadata (RFC 9728 section 2): this server as the resource, the app key as a
        bearer token in the header only; the authorization servers are REACH_GATEWAY_MCP_AUTHORIZATION_SERVERS,
        else the gateway itself, which issues the app keys (`reach apps create`; no OAuth flow)."""
        settings = self._admission.settings
        base = self.base_url(scope).rstrip("/")
        return {"resource": base + PATH,
                "authorization_servers": list(settings.listed(settings.mcp_authorization_servers)) or [base],
                "bearer_methods_supported": ["header"], "resource_name": "Agent-Reach gateway (MCP)"}


def mcp_endpoint(admission: Admission, directory: AppDirectory | None) -> McpEndpoint:
    return McpEndpoint(AdmissionHost(admission, directory))


def mcp_routes(endpoint: McpEndpoint) -> list[BaseRoute]:
    """`/mcp`, and its protected resource metadata at both well-known forms (public, as RFC 9728 has it)."""
    host = endpoint.host
    assert isinstance(host, AdmissionHost)

    async def metadata(request: Request) -> Response:
        return JSONResponse(host.metadata(request.scope), headers={"Cache-Control": "max-age=300"})

    return [LabelledRoute(PATH, endpoint, methods=["GET", "POST", "DELETE"]),
            LabelledRoute(METADATA, metadata, methods=["GET"]),
            LabelledRoute(METADATA + PATH, metadata, methods=["GET"])]
