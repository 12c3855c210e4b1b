"""`GET /v1/messages/{id}`, `/v1/messages/{id}/events` (SSE), `/v1/traces/{id}`, `/healthz`, `/metrics`."""

from __future__ import annotations

import time
from typing import Any

from fastapi import APIRouter, Request, Response
from fastapi.responses import JSONResponse, StreamingResponse

from reach.gateway.admission import Admission
from reach.gateway.bodies import Health, MessageRow, TraceIndex
from reach.gateway.events import find_row, receipt_stream
from reach.gateway.openapi import READ_ERRORS

_SSE_HEADERS = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}


class EventStream(StreamingResponse):
    """text/event-stream, so the OpenAPI document names that media type for the 200."""

    media_type = "text/event-stream"


def _passthrough(code: int, body: dict[str, Any]) -> JSONResponse:
    if code != 200:
        body = {"error": body.get("error", "unavailable"), "message": body.get("message", ""),
                "hint": body.get("hint")}
    return JSONResponse(body, status_code=code)


def status_routes(admission: Admission) -> APIRouter:
    router = APIRouter(tags=["status"])
    deps, settings = admission.deps, admission.settings

    @router.get("/v1/messages/{message_id}", response_model=MessageRow, responses=READ_ERRORS,
                summary="Where one message is")
    async def message(message_id: str) -> JSONResponse:
        """The status table's row: status, agent, attempt, result or error, and its timeline."""
        return _passthrough(*await deps.status.message(message_id))

    @router.get("/v1/traces/{trace_id}", response_model=TraceIndex, responses=READ_ERRORS,
                summary="The messages of one trace")
    async def trace(trace_id: str) -> JSONResponse:
        return _passthrough(*await deps.status.trace(trace_id))

    @router.get("/v1/messages/{message_id}/events", response_class=EventStream, responses={
        200: {"description": "text/event-stream: `event: receipt` per timeline entry, `event: terminal` last",
              "content": {"text/event-stream": {"schema": {"type": "string"}}}}, **READ_ERRORS},
        summary="Server-Sent Events of one message's receipts until terminal")
    async def events(message_id: str, request: Request) -> Response:
        code, row = await find_row(deps.status, message_id, wait_s=settings.sse_find, poll_s=settings.sse_poll)
        if code != 200:
            return _passthrough(code, row)
        try:
            sent = int(request.headers.get("last-event-id", "-1")) + 1
        except ValueError:
            sent = 0
        stream = receipt_stream(deps.status, message_id, row, sent=max(0, sent), poll_s=settings.sse_poll,
                                max_s=settings.sse_max, clock=time.monotonic)
        return EventStream(stream, headers=_SSE_HEADERS)

    @router.get("/healthz", response_model=Health, tags=["operations"],
                responses={503: {"model": Health, "description": "not ready"}, 431: READ_ERRORS[431]})
    async def healthz() -> JSONResponse:
        parts = {"registry": deps.catalog.healthy(), "replies": deps.replies.healthy()}
        ok = all(parts.values()) and deps.publisher.healthy()
        body = Health(ok=ok, **{k: "running" if v else "stopped" for k, v in parts.items()})
        return JSONResponse(body.model_dump(), status_code=200 if ok else 503)

    @router.get("/metrics", tags=["operations"], response_class=Response,
                responses={200: {"content": {"text/plain": {"schema": {"type": "string"}}}}, 431: READ_ERRORS[431]})
    async def metrics() -> Response:
        return Response(admission.metrics.exposition(), media_type="text/plain; version=0.0.4")

    return router
