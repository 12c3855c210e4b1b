"""The gRPC ingress over in-memory fakes (reach.grpc.ingress on a loopback grpc.aio server, a generated client):
every method of reach.v1.Gateway is the "gRPC" surface of reach.gateway.gate and refuses a caller without a
signature before it takes or publishes anything; a signed Send goes through /v1's checks; a refusal carries the
/v1 error code; payloads convert as documented."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Any, TypeVar

import grpc
import pytest
from google.protobuf.json_format import ParseDict
from google.protobuf.message import Message
from google.protobuf.struct_pb2 import Value

from reach import signing
from reach.callers import KeyEntry
from reach.gateway import gate
from reach.gateway.checks import Refusal
from reach.gateway.httpsettings import HttpSettings
from reach.gateway.intake import Admission
from reach.gateway.metrics import GatewayMetrics
from reach.grpc import ingress
from reach.grpc.v1 import gateway_pb2 as pb
from reach.grpc.v1 import gateway_pb2_grpc
from tests.unit.gateway.fakes import Fakes, app

T = TypeVar("T")


@asynccontextmanager
async def client(fakes: Fakes, settings: HttpSettings | None = None) -> AsyncIterator[gateway_pb2_grpc.GatewayStub]:
    admission = Admission(fakes.deps(), settings or HttpSettings(), GatewayMetrics())
    async with ingress.serving(admission, host="127.0.0.1", port=0) as port:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
            yield gateway_pb2_grpc.GatewayStub(channel)


def signed(method: str, request: Message, *, key: str = "key1", secret: bytes = b"secret-1") -> list[tuple[str, str]]:
    sig = signing.sign_request(secret, method="POST", target=f"/reach.v1.Gateway/{method}",
                               body=request.SerializeToString(), t=int(time.time()), nonce=uuid.uuid4().hex)
    return [("reach-key", key), ("reach-signature", sig)]


async def refusal(call: Awaitable[Any]) -> tuple[grpc.StatusCode, str | None]:
    with pytest.raises(grpc.aio.AioRpcError) as raised:
        await call
    return raised.value.code(), dict(raised.value.trailing_metadata() or ()).get("reach-error")


def run(scenario: Callable[[], Awaitable[T]]) -> T:
    return asyncio.run(scenario())


def echo(text: str = "hi") -> pb.SendRequest:
    return pb.SendRequest(capability="demo.echo", payload=ParseDict({"text": text}, Value()))


def test_the_grpc_surface_is_every_method_of_the_service() -> None:
    [surface] = [s for s in gate.SURFACES if s.name == "gRPC"]
    assert {path for _, path in surface.routes} == set(ingress.METHODS)
    assert all(method == gate.GRPC for method, _ in surface.routes)


def test_every_method_refuses_a_caller_without_a_signature_before_doing_anything() -> None:
    fakes = Fakes()

    async def scenario() -> list[tuple[grpc.StatusCode, str | None]]:
        async with client(fakes) as stub:
            calls: list[Awaitable[Any]] = [
                stub.Send(echo()), stub.Invoke(pb.InvokeRequest(request=echo())),
                stub.GetStatus(pb.GetStatusRequest(message_id="m1")),
                stub.WatchSteps(pb.WatchStepsRequest(message_id="m1")).read()]
            return [await refusal(call) for call in calls]

    assert run(scenario) == [(grpc.StatusCode.UNAUTHENTICATED, "missing")] * 4
    assert fakes.publisher.sent == [] and fakes.quotas.taken == 0 and fakes.quotas.read_tokens == 0


def test_a_signed_send_passes_v1s_checks_and_refusals_carry_v1s_error_code() -> None:
    fakes = Fakes(keys=[KeyEntry("key1", app(capabilities=("demo.echo",)), b"secret-1")])

    async def scenario() -> None:
        async with client(fakes) as stub:
            accepted = await stub.Send(echo(), metadata=signed("Send", echo()))
            assert accepted.status_url == f"/v1/messages/{accepted.message_id}"
            assert await refusal(stub.Send(echo(), metadata=signed("Send", echo("other")))) == (
                grpc.StatusCode.UNAUTHENTICATED, "denied")  # a signature over other bytes
            other = pb.SendRequest(capability="billing.refund", payload_json="{}")
            assert await refusal(stub.Send(other, metadata=signed("Send", other))) == (
                grpc.StatusCode.PERMISSION_DENIED, "forbidden")
            bare = pb.SendRequest(capability="demo.echo")
            assert await refusal(stub.Send(bare, metadata=signed("Send", bare))) == (
                grpc.StatusCode.INVALID_ARGUMENT, "bad_request")
            wrong = pb.SendRequest(capability="demo.echo", payload_json="{nope")
            assert await refusal(stub.Send(wrong, metadata=signed("Send", wrong))) == (
                grpc.StatusCode.INVALID_ARGUMENT, "bad_json")
            absent = pb.GetStatusRequest(message_id="}")
            assert await refusal(stub.GetStatus(absent, metadata=signed("GetStatus", absent))) == (
                grpc.StatusCode.NOT_FOUND, "not_found")

    run(scenario)
    [envelope] = fakes.publisher.sent
    assert (envelope.capability, envelope.tenant, envelope.source) == ("demo.echo", "acme", "gateway:app1")


def test_a_value_payloads_integral_numbers_are_integers_and_payload_json_is_exact() -> None:
    value = pb.SendRequest(capability="c", payload=ParseDict({"n": 3, "f": 1.5, "deep": [{"k": 2.0}]}, Value()))
    assert ingress.request_fields(value)["payload"] == {"n": 3, "f": 1.5, "deep": [{"k": 2}]}
    exact = pb.SendRequest(capability="c", payload_json='{"big": 12345678901234567890, "one": 1.0}', budget_ms=5)
    fields = ingress.request_fields(exact)
    assert fields["payload"] == {"big": 12345678901234567890, "one": 1.0} and fields["budget_ms"] == 5
    with pytest.raises(Refusal, match="no payload"):
        ingress.request_fields(pb.SendRequest(capability="c"))


def test_strict_tags_reach_the_envelope_request_as_over_v1() -> None:
    from reach.gateway.bodies import EnvelopeRequest

    asked = pb.SendRequest(capability="c", payload_json="{}", routing=pb.Routing(tags=["gpu"], strict_tags=True))
    body = EnvelopeRequest.model_validate(ingress.request_fields(asked))
    assert body.routing.tags == ["gpu"] and body.routing.strict_tags
