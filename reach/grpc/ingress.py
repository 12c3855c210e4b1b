"""gRPC ingress: `reach.v1.Gateway` (Send, Invoke, GetStatus, WatchSteps) on grpc.aio, on the HTTP service's event
loop, through the same admission as /v1 (reach.gateway.intake.Admission and its Gate: identity, allow-list, spend,
write and read quotas, stream and wait slots per app; the "gRPC" row of reach.gateway.gate.SURFACES).

Each method is registered with the raw request bytes as its argument: the signature (metadata `reach-key`,
`reach-signature`, v2 over `t.n.POST./reach.v1.Gateway/<Method>.<bytes>`) is checked over the bytes that came, before
they are parsed, as /v1 checks the body. A message over REACH_GATEWAY_MAX_BODY_BYTES is refused by gRPC itself
(RESOURCE_EXHAUSTED) before it is read into a handler. Refusals carry the /v1 error code in the trailing metadata
(`reach-error`, and `retry-after` when there is one), with the status code of `CODES`."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, TypeVar

import grpc
from google.protobuf import json_format
from google.protobuf.message import DecodeError, Message
from grpc_reflection.v1alpha import reflection

from reach import signing
from reach.callers import AuthFailure, CallerApp
from reach.errors import InfraUnavailable
from reach.gateway import checks
from reach.gateway.auth import V1_REFUSED
from reach.gateway.bodies import EnvelopeRequest, InvokeRequest
from reach.gateway.events import Step, find_row, step_stream
from reach.gateway.intake import Admission
from reach.gateway.ports import Verified
from reach.gateway.routes_envelopes import invoke_answer
from reach.gateway.routes_status import owned
from reach.grpc.v1 import gateway_pb2 as pb

log = logging.getLogger("reach.gateway.grpc")
SERVICE = pb.DESCRIPTOR.services_by_name["Gateway"].full_name  # reach.v1.Gateway
METHODS = tuple(f"/{SERVICE}/{m.name}" for m in pb.DESCRIPTOR.services_by_name["Gateway"].methods)
KEY, SIGNATURE = "reach-key", "reach-signature"  # the metadata of /v1's Reach-Key and Reach-Signature headers
CODES = {400: grpc.StatusCode.INVALID_ARGUMENT, 401: grpc.StatusCode.UNAUTHENTICATED,
         403: grpc.StatusCode.PERMISSION_DENIED, 404: grpc.StatusCode.NOT_FOUND, 408: grpc.StatusCode.DEADLINE_EXCEEDED,
         409: grpc.StatusCode.ABORTED, 410: grpc.StatusCode.NOT_FOUND, 413: grpc.StatusCode.INVALID_ARGUMENT,
         422: grpc.StatusCode.FAILED_PRECONDITION, 429: grpc.StatusCode.RESOURCE_EXHAUSTED,
         503: grpc.StatusCode.UNAVAILABLE, 504: grpc.StatusCode.DEADLINE_EXCEEDED}
MAX_STREAMS_PER_CONNECTION = 100  # calls in flight on one HTTP/2 connection (a client multiplexes more on more)
MAX_CALLS = 1_000  # calls in flight on the whole server; past it RESOURCE_EXHAUSTED (no caller holds them all)
IDLE_CONNECTION_S = 300.0
AGE_MARGIN_S = 60.0  # a connection lives at most the longest stream (REACH_GATEWAY_SSE_MAX) and this
SAFE_INTEGER = 2**53  # a protobuf Value number is a double: integral ones below this are integers in JSON
M = TypeVar("M", bound=Message)


def integral(value: Any) -> Any:
    """A JSON value from a protobuf Value, with the integral numbers as integers (a Value has only doubles)."""
    if isinstance(value, float) and value.is_integer() and abs(value) < SAFE_INTEGER:
        return int(value)
    if isinstance(value, dict):
        return {k: integral(v) for k, v in value.items()}
    if isinstance(value, list):
        return [integral(v) for v in value]
    return value


def request_fields(request: pb.SendRequest) -> dict[str, Any]:
    """The SendRequest as /v1's JSON body (the same names; int64 fields, which protobuf's JSON writes as strings, as
    numbers), for EnvelopeRequest's checks."""
    try:
        document = json_format.MessageToDict(request, preserving_proto_field_name=True)
    except (json_format.Error, ValueError) as exc:  # e.g. a Value with no kind set
        raise checks.Refusal(400, "bad_request", f"the request cannot be read as JSON: {exc}") from None
    for name in ("budget_ms", "expire_at", "max_tokens"):
        if name in document:
            document[name] = int(document[name])
    if "payload_json" in document:
        document["payload"] = checks.parse_json(document.pop("payload_json").encode())
    elif "payload" in document:
        document["payload"] = integral(document["payload"])
    else:  # an unset oneof: "payload": null is a Value with null_value set
        raise checks.Refusal(400, "bad_request", "the request has no payload",
                             "set `payload` (a protobuf Value) or `payload_json` (JSON text)")
    return document


def parsed(raw: bytes, kind: type[M]) -> M:
    message = kind()
    try:
        message.ParseFromString(raw)
    except (DecodeError, RuntimeWarning) as exc:
        raise checks.Refusal(400, "bad_request", f"the request is not a {kind.DESCRIPTOR.full_name}: {exc}") from None
    return message


def as_message(document: dict[str, Any], kind: type[M]) -> M:
    return json_format.ParseDict(document, kind(), ignore_unknown_fields=True)


class Ingress:
    """The methods of reach.v1.Gateway over one Admission."""

    def __init__(self, admission: Admission) -> None:
        self.admission = admission

    async def _admitted(self, raw: bytes, context: grpc.aio.ServicerContext,
                        method: str) -> tuple[CallerApp, Verified]:
        """The metadata screened (before anything else), then the v2 signature over the raw request bytes."""
        metadata = {k: v for k, v in (context.invocation_metadata() or ()) if isinstance(v, str)}
        key_id, signature = metadata.get(KEY), metadata.get(SIGNATURE)
        self.admission.screen(key_id, signature)
        verified = await self.admission.authenticate(key_id, signature, raw, method="POST", target=method)
        return verified.entry.app, verified

    async def send(self, raw: bytes, context: grpc.aio.ServicerContext, app: CallerApp) -> pb.Accepted:
        body = checks.parse_model(request_fields(parsed(raw, pb.SendRequest)), EnvelopeRequest)
        # shielded: a cancelled call must not leave its idempotency claim pending (the publish finishes either way)
        accepted = await asyncio.shield(self.admission.publish(await self.admission.admit(app, body)))
        return as_message(accepted.model_dump(), pb.Accepted)

    async def invoke(self, raw: bytes, context: grpc.aio.ServicerContext, app: CallerApp) -> pb.InvokeReply:
        request = parsed(raw, pb.InvokeRequest)
        fields = request_fields(request.request)
        if request.HasField("timeout_ms"):
            fields["timeout_ms"] = request.timeout_ms
        _code, answer = await invoke_answer(self.admission, app, checks.parse_model(fields, InvokeRequest))
        return as_message(answer.model_dump(mode="json", exclude_none=True), pb.InvokeReply)

    async def get_status(self, raw: bytes, context: grpc.aio.ServicerContext, app: CallerApp) -> pb.MessageStatus:
        message_id = parsed(raw, pb.GetStatusRequest).message_id
        await self.admission.take_read(app)
        code, row = owned(app, message_id, *await self.admission.deps.status.message(message_id))
        if code != 200:
            raise checks.Refusal(code, str(row.get("error", "unavailable")), str(row.get("message", "")))
        return as_message({"message_id": message_id, "status": row.get("status", ""), "row": row}, pb.MessageStatus)

    async def watch_steps(self, raw: bytes, context: grpc.aio.ServicerContext,
                          app: CallerApp) -> AsyncIterator[pb.Step]:
        request = parsed(raw, pb.WatchStepsRequest)
        await self.admission.take_read(app)
        settings, status = self.admission.settings, self.admission.deps.status
        with self.admission.gate.streams.hold(app):  # one of the app's stream slots, shared with SSE and A2A
            code, row = owned(app, request.message_id, *await find_row(
                status, request.message_id, wait_s=settings.sse_find, poll_s=settings.sse_poll))
            if code != 200:
                raise checks.Refusal(code, str(row.get("error", "unavailable")), str(row.get("message", "")))
            steps = step_stream(status, request.message_id, row, sent=max(0, request.after),
                                poll_s=settings.sse_poll, max_s=settings.sse_max, clock=time.monotonic)
            async for step in steps:
                if step is not None:  # a keep-alive: HTTP/2 has its own pings
                    yield step_message(step)


def step_message(step: Step) -> pb.Step:
    event, data, index = step
    message = pb.Step(event=event)
    if index is not None:
        message.index = index
    json_format.ParseDict(data, message.data)
    return message


async def _refuse(admission: Admission, context: grpc.aio.ServicerContext, verified: Verified | None,
                  refusal: checks.Refusal) -> None:
    """Abort the call with the refusal's status code, its message and hint, and the /v1 error code in the trailing
    metadata; a refusal after the signature passed keeps or gives back its nonce as /v1 does."""
    await admission.refused_after_auth(verified, refusal)
    trailing = [("reach-error", refusal.body.error)]
    trailing += [("retry-after", refusal.headers["Retry-After"])] if "Retry-After" in refusal.headers else []
    details = refusal.body.message + (f" ({refusal.body.hint})" if refusal.body.hint else "")
    await context.abort(CODES.get(refusal.status, grpc.StatusCode.UNKNOWN), details, trailing_metadata=tuple(trailing))


Unary = Callable[[bytes, grpc.aio.ServicerContext, CallerApp], Awaitable[Message]]
Streaming = Callable[[bytes, grpc.aio.ServicerContext, CallerApp], AsyncIterator[Message]]


async def _failed(ingress: Ingress, context: grpc.aio.ServicerContext, verified: Verified | None, method: str,
                  exc: Exception) -> None:
    """Abort the call for `exc`: a refusal as /v1 answers it, infrastructure as UNAVAILABLE, anything else (a bug)
    logged here and answered INTERNAL with a fixed text (never the exception's)."""
    if isinstance(exc, checks.Refusal):
        await _refuse(ingress.admission, context, verified, exc)
    elif isinstance(exc, InfraUnavailable):
        await context.abort(grpc.StatusCode.UNAVAILABLE, str(exc), trailing_metadata=(("retry-after", "1"),))
    else:
        log.error("gRPC %s failed", method, exc_info=exc)
        await context.abort(grpc.StatusCode.INTERNAL, "internal error")


def _unary(ingress: Ingress, method: str, handle: Unary) -> grpc.RpcMethodHandler:
    async def call(raw: bytes, context: grpc.aio.ServicerContext) -> Message:
        verified = None
        try:
            app, verified = await ingress._admitted(raw, context, method)
            return await handle(raw, context, app)
        except grpc.aio.AbortError:
            raise
        except Exception as exc:  # noqa: BLE001 - every failure is answered by _failed
            await _failed(ingress, context, verified, method, exc)
        raise AssertionError("unreachable: context.abort raises")

    return grpc.unary_unary_rpc_method_handler(call, response_serializer=_serialized)


def _streaming(ingress: Ingress, method: str, handle: Streaming) -> grpc.RpcMethodHandler:
    async def call(raw: bytes, context: grpc.aio.ServicerContext) -> AsyncIterator[Message]:
        verified = None
        try:
            app, verified = await ingress._admitted(raw, context, method)
            async for message in handle(raw, context, app):
                yield message
        except grpc.aio.AbortError:
            raise
        except Exception as exc:  # noqa: BLE001 - every failure is answered by _failed
            await _failed(ingress, context, verified, method, exc)

    return grpc.unary_stream_rpc_method_handler(call, response_serializer=_serialized)


class ScreenFirst(grpc.aio.ServerInterceptor):
    """Refuses a call of reach.v1.Gateway whose metadata alone condemns it (no key, no signature, a malformed or
    stale one) before its request message is read: the refusal is a streaming handler that never reads, so a caller
    without credentials cannot hold a call open by sending its message slowly (/v1 screens headers the same way)."""

    def __init__(self, admission: Admission) -> None:
        self.admission = admission

    async def intercept_service(self, continuation: Callable[[grpc.HandlerCallDetails], Awaitable[Any]],
                                details: grpc.HandlerCallDetails) -> Any:
        method = details.method
        if method not in METHODS:
            return await continuation(details)  # reflection: public by design, bounded by MAX_CALLS
        metadata = {k: v for k, v in (details.invocation_metadata or ()) if isinstance(v, str)}
        try:
            self.admission.screen(metadata.get(KEY), metadata.get(SIGNATURE))
            parsed_sig = signing.parse(metadata.get(SIGNATURE) or "")
            if not isinstance(parsed_sig, AuthFailure) and not parsed_sig.v2:  # v1 names no method: never here
                raise checks.refuse_auth(V1_REFUSED)
        except checks.Refusal as refusal:
            return _refusing(refusal, streams=method.endswith("/WatchSteps"))
        return await continuation(details)


def _refusing(refusal: checks.Refusal, *, streams: bool) -> grpc.RpcMethodHandler:
    """A handler that aborts with `refusal` without reading the request (its kind only decides how the server
    reads; on the wire a unary call and a one-message stream are the same)."""
    details = refusal.body.message + (f" ({refusal.body.hint})" if refusal.body.hint else "")
    code = CODES.get(refusal.status, grpc.StatusCode.UNKNOWN)

    async def refuse(_requests: Any, context: grpc.aio.ServicerContext) -> Any:
        await context.abort(code, details, trailing_metadata=(("reach-error", refusal.body.error),))

    async def refuse_streaming(_requests: Any, context: grpc.aio.ServicerContext) -> AsyncIterator[Any]:
        await context.abort(code, details, trailing_metadata=(("reach-error", refusal.body.error),))
        yield None  # pragma: no cover - abort raises

    if streams:
        return grpc.stream_stream_rpc_method_handler(refuse_streaming)
    return grpc.stream_unary_rpc_method_handler(refuse)


def _serialized(message: Message) -> bytes:
    return message.SerializeToString()


def handlers(admission: Admission) -> grpc.GenericRpcHandler:
    """reach.v1.Gateway's methods, each given its request's raw bytes (no deserializer: the signature covers them)."""
    ingress = Ingress(admission)
    path = f"/{SERVICE}/"
    return grpc.method_handlers_generic_handler(SERVICE, {
        "Send": _unary(ingress, path + "Send", ingress.send),
        "Invoke": _unary(ingress, path + "Invoke", ingress.invoke),
        "GetStatus": _unary(ingress, path + "GetStatus", ingress.get_status),
        "WatchSteps": _streaming(ingress, path + "WatchSteps", ingress.watch_steps),
    })


@contextlib.asynccontextmanager
async def serving(admission: Admission, *, host: str, port: int,
                  tls: tuple[bytes, bytes] | None = None) -> AsyncIterator[int]:
    """The gRPC server on `host:port` (0: a free port; the port bound is yielded) with server reflection, on the
    running event loop, while the block runs; `tls` (certificate chain, key: PEM bytes) serves TLS. Calls in flight
    get up to 5 s to finish when it stops."""
    settings = admission.settings
    limit = settings.max_body_bytes
    server = grpc.aio.server(interceptors=[ScreenFirst(admission)], maximum_concurrent_rpcs=MAX_CALLS, options=[
        ("grpc.max_receive_message_length", limit),  # RESOURCE_EXHAUSTED past it, before a handler reads it
        ("grpc.max_send_message_length", 4 * limit),
        ("grpc.max_metadata_size", settings.max_header_bytes),  # as /v1's cap on the request head
        ("grpc.max_concurrent_streams", MAX_STREAMS_PER_CONNECTION),
        ("grpc.max_connection_idle_ms", int(IDLE_CONNECTION_S * 1000)),  # an idle client's connection is closed
        # no connection outlives the longest stream: a call stuck sending its message ends with it
        ("grpc.max_connection_age_ms", int((settings.sse_max + AGE_MARGIN_S) * 1000)),
        ("grpc.max_connection_age_grace_ms", 5_000),
        ("grpc.so_reuseport", 0)])  # a second gateway on the same port fails to start instead of sharing it
    server.add_generic_rpc_handlers((handlers(admission),))
    reflection.enable_server_reflection((SERVICE, reflection.SERVICE_NAME), server)
    address = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
    if tls is None:
        bound = server.add_insecure_port(address)
    else:
        bound = server.add_secure_port(address, grpc.ssl_server_credentials([(tls[1], tls[0])]))
    await server.start()
    log.info("gRPC ingress (%s, with server reflection) on %s:%d", SERVICE, host, bound)
    try:
        yield bound
    finally:
        await server.stop(5)


