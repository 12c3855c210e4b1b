"""`GET /v1/messages/{id}`, `/v1/messages/{id}/events` (SSE), `/v1/traces/{id}`, `/healthz`, `/metrics`."""

from __future__ import annotations

import asyncio
import hmac
import ipaddress
import time
from typing import Any

from fastapi import APIRouter, Request, Response
from fastapi.responses import JSONResponse, StreamingResponse

from reach.callers import CallerApp
from reach.gateway.bodies import Health, MessageRow, TraceIndex
from reach.gateway.events import find_row, receipt_stream
from reach.gateway.gate import ROWS_PER_READ
from reach.gateway.intake import Admission
from reach.gateway.openapi import READ_ERRORS
from reach.gateway.routes_envelopes import SIGNED, target_of

_SSE_HEADERS = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}
TRACE_READS_AT_ONCE = 16  # status rows one trace read reads concurrently


# One event of the stream, as OpenAPI 3.1 describes an event stream's `schema` (each event, not the whole body)
SSE_EVENT: dict[str, Any] = {
    "type": "object", "required": ["event", "data"],
    "properties": {"event": {"type": "string", "enum": ["receipt", "terminal", "timeout"]},
                   "data": {"type": "string", "description": "one JSON object on one line: a timeline entry "
                            "(the status row's), or for `timeout` why the stream closed"},
                   "id": {"type": "string", "description": "the entry's index; send it back as Last-Event-ID"}},
}


class EventStream(StreamingResponse):
    """text/event-stream."""

    media_type = "text/event-stream"


def _passthrough(code: int, body: dict[str, Any]) -> JSONResponse:
    if code != 200:
        body = {"error": body.get("error", "unavailable"), "message": body.get("message", ""),
                "hint": body.get("hint")}
    return JSONResponse(body, status_code=code)


async def signed_get(request: Request, admission: Admission) -> CallerApp:
    """A GET is signed like a POST, over its method, target and an empty body (401 otherwise)."""
    key_id, signature = (request.headers.get(name) for name in SIGNED)
    admission.screen(key_id, signature)
    verified = await admission.authenticate(key_id, signature, b"", method=request.method,
                                            target=target_of(request))
    app = verified.entry.app
    request.state.app_id = app.app_id
    request.state.verified = verified  # a later refusal gives its nonce back (reach.gateway.service)
    await admission.take_read(app)
    return app


def unknown_message(message_id: str) -> tuple[int, dict[str, Any]]:
    """The status views' own answer for an id they do not have (reach.streams.status.views), word for word."""
    return 404, {"error": "not_found", "message": f"No message {message_id!r} in the status table. Check the id, "
                 "or it may be older than the retention period."}


def unknown_trace(trace_id: str) -> tuple[int, dict[str, Any]]:
    return 404, {"error": "not_found", "message": f"No trace {trace_id!r}."}


def owned(app: CallerApp, message_id: str, code: int, row: dict[str, Any]) -> tuple[int, dict[str, Any]]:
    """Another tenant's row reads as absent: a 403 would tell the caller the id exists."""
    if code == 200 and row.get("tenant") != app.tenant:
        return unknown_message(message_id)
    return code, row


async def own_trace(admission: Admission, app: CallerApp, trace_id: str) -> tuple[int, dict[str, Any]]:
    """The trace's members of the app's tenant; 404 when it has none. At most REACH_GATEWAY_TRACE_ROWS members are
    read (the first ones; `truncated` says there are more), each 25 rows one read token (the first was the
    request's own), at most TRACE_READS_AT_ONCE at a time: one read token no longer buys thousands of row reads
    (issue 37, finding 10)."""
    code, body = await admission.deps.status.trace(trace_id)
    if code != 200:
        return code, body
    every = [str(mid) for mid in body.get("message_ids", [])]
    ids = every[:admission.settings.trace_rows]
    if len(ids) > ROWS_PER_READ:
        await admission.take_read(app, len(ids) - ROWS_PER_READ)
    at_once = asyncio.Semaphore(TRACE_READS_AT_ONCE)

    async def row(mid: str) -> tuple[int, dict[str, Any]]:
        async with at_once:
            return await admission.deps.status.message(mid)

    rows = await asyncio.gather(*(row(mid) for mid in ids))
    if any(c not in (200, 404) for c, _ in rows):  # a worker not answering: not a reason to hide members
        return next((c, r) for c, r in rows if c not in (200, 404))
    mine = [mid for mid, (c, row) in zip(ids, rows, strict=True) if owned(app, mid, c, row)[0] == 200]
    if not mine:
        return unknown_trace(trace_id)
    more = {"truncated": True} if len(every) > len(ids) else {}
    return 200, {"trace_id": trace_id, "message_ids": mine, **more}


def metrics_allowed(request: Request, token: str | None) -> bool:
    """`GET /metrics` names app ids, tenants, traffic and spend: with REACH_GATEWAY_METRICS_TOKEN set it needs
    `Authorization: Bearer <token>`; unset, only a peer on the loopback interface gets it (issue 37, finding 9)."""
    if token is not None:
        given = request.headers.get("authorization") or ""
        return hmac.compare_digest(given.encode(), f"Bearer {token}".encode())
    peer = request.client.host if request.client is not None else ""
    try:
        return ipaddress.ip_address(peer).is_loopback
    except ValueError:
        return False


def status_routes(admission: Admission) -> APIRouter:
    router = APIRouter(tags=["status"])
    deps, settings = admission.deps, admission.settings
    slots = admission.gate.streams  # shared with A2A's streams: one count of an app's open streams

    @router.get("/v1/messages/{message_id}", response_model=MessageRow, responses=READ_ERRORS,
                summary="Where one message is")
    async def message(message_id: str, request: Request) -> JSONResponse:
        """The status table's row: status, agent, attempt, result or error, and its timeline (signed GET)."""
        app = await signed_get(request, admission)
        return _passthrough(*owned(app, message_id, *await deps.status.message(message_id)))

    @router.get("/v1/traces/{trace_id}", response_model=TraceIndex, responses=READ_ERRORS,
                summary="The messages of one trace")
    async def trace(trace_id: str, request: Request) -> JSONResponse:
        """The trace's messages of the calling app's tenant (signed GET)."""
        app = await signed_get(request, admission)
        return _passthrough(*await own_trace(admission, app, trace_id))

    # response_class=Response: the errors keep their application/json; only the 200 is an event stream
    @router.get("/v1/messages/{message_id}/events", response_class=Response, responses={
        200: {"description": "text/event-stream: `event: receipt` per timeline entry, `event: terminal` last",
              "content": {"text/event-stream": {"schema": SSE_EVENT}}}, **READ_ERRORS},
        summary="Server-Sent Events of one message's receipts until terminal")
    async def events(message_id: str, request: Request) -> Response:
        app = await signed_get(request, admission)
        slots.take(app)
        try:
            code, row = await find_row(deps.status, message_id, wait_s=settings.sse_find, poll_s=settings.sse_poll)
        except BaseException:
            slots.give_back(app)
            raise
        code, row = owned(app, message_id, code, row)  # a row's tenant never changes: checked once
        if code != 200:
            slots.give_back(app)
            return _passthrough(code, row)
        try:
            sent = int(request.headers.get("last-event-id", "-1")) + 1
        except ValueError:
            sent = 0
        stream = receipt_stream(deps.status, message_id, row, sent=max(0, sent), poll_s=settings.sse_poll,
                                max_s=settings.sse_max, clock=time.monotonic)
        return EventStream(slots.holding(app, stream), headers=_SSE_HEADERS)

    @router.get("/healthz", response_model=Health, tags=["operations"],
                responses={503: {"model": Health, "description": "not ready"}, 431: READ_ERRORS[431]})
    async def healthz() -> JSONResponse:
        parts = {"registry": deps.catalog.healthy(), "replies": deps.replies.healthy(),
                 "directory": deps.authenticator.healthy()}
        ok = all(parts.values()) and deps.publisher.healthy()
        body = Health(ok=ok, **{k: "running" if v else "stopped" for k, v in parts.items()})
        return JSONResponse(body.model_dump(), status_code=200 if ok else 503)

    token = settings.metrics_token.get_secret_value() if settings.metrics_token is not None else None

    @router.get("/metrics", tags=["operations"], response_class=Response,
                responses={200: {"content": {"text/plain": {"schema": {"type": "string"}}}}, 401: READ_ERRORS[401],
                           431: READ_ERRORS[431]})
    async def metrics(request: Request) -> Response:
        if not metrics_allowed(request, token):
            return JSONResponse({"error": "unauthorized", "message": "the metrics name apps, tenants, traffic and "
                                 "spend: they need the metrics token", "hint": "send Authorization: Bearer "
                                 "$REACH_GATEWAY_METRICS_TOKEN, or scrape from the gateway's own host (loopback)"},
                                status_code=401, headers={"WWW-Authenticate": 'Bearer realm="agent-reach-metrics"'})
        return Response(admission.metrics.exposition(), media_type="text/plain; version=0.0.4")

    return router
