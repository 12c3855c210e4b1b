"""`POST /v1/envelopes`, `POST /v1/envelopes:batch`, `POST /v1/invoke`: signed requests onto the bus."""

from __future__ import annotations

import asyncio
import time

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, Response

from reach import signing
from reach.callers import CallerApp
from reach.gateway import answers, checks
from reach.gateway.bodies import Accepted, BatchItem, BatchRequest, BatchResult, EnvelopeRequest, InvokeRequest
from reach.gateway.events import find_row, is_terminal
from reach.gateway.intake import Admission
from reach.gateway.openapi import ERRORS, INVOKE_ERRORS, request_body

SIGNED = ("Reach-Key", "Reach-Signature")
ENVELOPES = "/v1/envelopes"  # the hot path (reach.gateway.service.HotPath)


def target_of(request: Request) -> str:
    """The request target as the caller sent it and signed it: the raw (percent-encoded) path and query."""
    scope = request.scope
    raw_path = scope.get("raw_path")
    path = raw_path.decode("latin-1") if raw_path else scope["path"]
    return signing.request_target(path, scope.get("query_string", b"").decode("latin-1"))


async def read_limited(request: Request, limit: int, timeout_s: float) -> bytes:
    """The raw body: 413 past `limit` (from Content-Length, or as soon as the stream passes it), 408 when it does
    not arrive within `timeout_s`."""
    try:
        async with asyncio.timeout(timeout_s):  # no task per request, as wait_for makes
            return await checks.read_body(request.headers.get("content-length"), request.stream(), limit)
    except TimeoutError:
        raise checks.Refusal(408, "body_timeout", f"the body did not arrive within {timeout_s:g}s",
                             "send the whole body at once") from None


async def signed(request: Request, admission: Admission, limit: int) -> tuple[CallerApp, object]:
    """Auth headers (401, before any body byte is read) -> body size (413) -> v2 signature over method, target
    and the raw bytes (401) -> JSON (400)."""
    key_id, signature = (request.headers.get(name) for name in SIGNED)
    admission.screen(key_id, signature)
    raw = await read_limited(request, limit, admission.settings.body_timeout)
    verified = await admission.authenticate(key_id, signature, raw, method=request.method,
                                            target=target_of(request))
    app = verified.entry.app
    request.state.app_id = app.app_id
    request.state.verified = verified  # a later refusal gives its nonce back (reach.gateway.service)
    return app, checks.parse_json(raw)


def envelope_routes(admission: Admission) -> APIRouter:
    router = APIRouter(tags=["envelopes"])
    settings = admission.settings
    metrics = admission.metrics
    accept_seconds = metrics.accept_seconds.labels("/v1/envelopes")  # the label child, looked up once

    @router.post(ENVELOPES, status_code=202, response_model=Accepted, responses=ERRORS,
                 openapi_extra=request_body(EnvelopeRequest), summary="Send one envelope")
    async def send(request: Request) -> Response:
        """202 once the broker acknowledged the envelope (never before)."""
        started = time.perf_counter()
        app, document = await signed(request, admission, settings.max_body_bytes)
        body = checks.parse_model(document, EnvelopeRequest)
        accepted = await admission.publish(await admission.admit(app, body))
        accept_seconds.observe(time.perf_counter() - started)
        # the model is built by us, so FastAPI's response validation and encoding would only cost time
        return Response(accepted.model_dump_json().encode(), status_code=202, media_type="application/json")

    @router.post("/v1/envelopes:batch", response_model=BatchResult, responses=ERRORS,
                 openapi_extra=request_body(BatchRequest), summary="Send up to 500 envelopes")
    async def batch(request: Request) -> BatchResult:
        """Each item is checked and published on its own; `items[i].status` is what it would have got alone."""
        started = time.perf_counter()
        app, document = await signed(request, admission, settings.max_batch_bytes)
        body = checks.parse_model(document, BatchRequest)
        if len(body.items) > settings.max_batch_items:
            raise checks.Refusal(400, "bad_request", f"{len(body.items)} items; at most {settings.max_batch_items} "
                                 "per batch", "split the batch")

        async def one(index: int, item: object) -> BatchItem:
            try:
                admitted = await admission.admit(app, checks.parse_model(item, EnvelopeRequest))
                return BatchItem(index=index, status=202, accepted=await admission.publish(admitted))
            except checks.Refusal as refusal:
                return BatchItem(index=index, status=refusal.status, error=refusal.body)

        # admitted items are published together: one linger window, acks awaited concurrently
        items = await asyncio.gather(*(one(i, item) for i, item in enumerate(body.items)))
        ok = sum(1 for item in items if item.status == 202)
        metrics.accept_seconds.labels("/v1/envelopes:batch").observe(time.perf_counter() - started)
        return BatchResult(accepted=ok, refused=len(items) - ok, items=list(items))

    @router.post("/v1/invoke", response_model=answers.InvokeAnswer, responses={
        **INVOKE_ERRORS, 202: {"model": answers.InvokeAnswer, "description": "the agent asks a question "
                               "(INPUT_REQUIRED, `message` says it): answer with POST /v1/messages/{id}:input"}},
                 openapi_extra=request_body(InvokeRequest), summary="Send one envelope and wait for its result")
    async def invoke(request: Request) -> JSONResponse:
        """200 with the agent's result when COMPLETED; the terminal status with an error body otherwise; 504
        when no terminal receipt came within timeout_ms (capped by REACH_GATEWAY_INVOKE_TIMEOUT_MAX_MS)."""
        app, document = await signed(request, admission, settings.max_body_bytes)
        code, answer = await invoke_answer(admission, app, checks.parse_model(document, InvokeRequest))
        return JSONResponse(answer.model_dump(mode="json"), status_code=code)

    return router


async def invoke_answer(admission: Admission, app: CallerApp, body: InvokeRequest) -> tuple[int, answers.InvokeAnswer]:
    """Admit, publish and wait for the terminal receipt (or the status row of the first request with the same
    idempotency_key): how the invoke ended, as an HTTP status and its answer (/v1/invoke and gRPC Invoke)."""
    settings = admission.settings
    timeout_ms = min(body.timeout_ms or settings.invoke_timeout_ms, settings.invoke_timeout_max_ms)
    replies = admission.deps.replies
    admitted = await admission.admit(app, body, reply_to=replies.topic, default_budget_ms=timeout_ms)
    envelope = admitted.envelope
    waiter = replies.expect(envelope.message_id, envelope.generation)
    try:  # shielded: a caller that gives up (a gRPC cancel) must not leave the idempotency claim pending
        accepted = await asyncio.shield(admission.publish(admitted))
    except BaseException:
        waiter.cancel()
        raise
    if accepted.message_id != envelope.message_id:  # a repeated idempotency_key: its reply went elsewhere
        waiter.cancel()
        try:
            with admission.gate.waits.hold(app):  # it re-reads the status row while it waits (reach.gateway.gate)
                return await _from_status(admission, accepted, timeout_ms)
        except checks.Refusal as refusal:
            raise checks.Refusal(refusal.status, refusal.body.error, f"{refusal.body.message}; the first "
                                 f"request with this idempotency_key is {accepted.message_id}",
                                 f"read {accepted.status_url}, or retry later", headers=refusal.headers) from None
    receipt = await waiter.result(timeout_ms / 1000)  # the fallback chain's final ending (decision 0069)
    return (answers.from_endings(waiter.endings) if receipt is not None
            else answers.timed_out(accepted.message_id, accepted.trace_id, timeout_ms))


async def _from_status(admission: Admission, accepted: Accepted, timeout_ms: int) -> tuple[int, answers.InvokeAnswer]:
    """Wait on the status table for the first request's terminal row."""
    loop = asyncio.get_running_loop()
    give_up = loop.time() + timeout_ms / 1000
    poll = admission.settings.sse_poll
    while loop.time() < give_up:
        code, row = await find_row(admission.deps.status, accepted.message_id, wait_s=0, poll_s=poll)
        if code == 200 and is_terminal(row):
            return answers.from_row(row)
        await asyncio.sleep(poll)
    return answers.timed_out(accepted.message_id, accepted.trace_id, timeout_ms)
