"""gRPC ingress end to end (`reach gateway --grpc-port`, docs/grpc.md): a client built from the generated code and
`grpcurl` against a real gateway process, router, broker and Redis. The same app keys, signatures (as metadata),
quotas and checks as /v1: a signed Invoke ends COMPLETED and its steps stream to the terminal one, another tenant's
app finds neither its status nor its steps, a bad signature is UNAUTHENTICATED, an app over its quota
RESOURCE_EXHAUSTED, an oversized message is refused and nothing is sent."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc
import pytest
from cryptography.fernet import Fernet
from google.protobuf.json_format import MessageToDict, ParseDict
from google.protobuf.message import Message
from google.protobuf.struct_pb2 import Value

from reach import signing
from reach.grpc.v1 import gateway_pb2 as pb
from reach.grpc.v1 import gateway_pb2_grpc
from reach.names import Names
from reach.tooling.local.process import free_port
from tests.integration.agent_support import running, wait_for
from tests.integration.stream_app import StreamApp
from tests.integration.test_gateway_http import Gateway, create_app, echo_agent, records_on

pytestmark = pytest.mark.integration
GRPCURL = Path.home() / ".cache" / "agent-reach" / "bin" / "grpcurl"  # `make setup` builds it (Makefile $(GRPCURL))


@dataclass
class Ingress:
    gateway: Gateway
    address: str
    channel: grpc.Channel
    stub: gateway_pb2_grpc.GatewayStub

    def metadata(self, method: str, raw: bytes, app: str = "shop", secret: str | None = None) -> list[tuple[str, str]]:
        """The app's key id and its v2 signature over the request's bytes, as gRPC metadata."""
        made = self.gateway.apps[app]
        signature = signing.sign_request((secret or made["secret"]).encode(), method="POST",
                                         target=f"/reach.v1.Gateway/{method}", body=raw, t=int(time.time()),
                                         nonce=uuid.uuid4().hex)
        return [("reach-key", made["key_id"]), ("reach-signature", signature)]

    def call(self, method: str, request: Message, app: str = "shop", secret: str | None = None) -> Any:
        """A unary call of the generated stub, signed over the bytes the stub sends."""
        raw = request.SerializeToString()
        return getattr(self.stub, method)(request, metadata=self.metadata(method, raw, app, secret), timeout=60)


@pytest.fixture
def ingress(stream_app: StreamApp, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Ingress]:
    monkeypatch.setenv("REACH_GATEWAY_SECRETS_KEY", Fernet.generate_key().decode())
    port = free_port()
    gw = Gateway(tmp_path, {"shop": create_app("shop"), "tiny": create_app("tiny", "--rate", "0.01", "--burst", "1"),
                            "rival": create_app("rival", "--tenant", "rival")},
                 env={"REACH_GATEWAY_GRPC_PORT": str(port)})
    gw.start()
    address = f"127.0.0.1:{port}"
    channel = grpc.insecure_channel(address)
    try:
        grpc.channel_ready_future(channel).result(timeout=30)
        yield Ingress(gw, address, channel, gateway_pb2_grpc.GatewayStub(channel))
    finally:
        channel.close()
        gw.stop()


def echo(text: str) -> pb.SendRequest:
    return pb.SendRequest(capability="demo.echo", payload=ParseDict({"text": text}, Value()))


@dataclass
class Refused:
    code: grpc.StatusCode
    error: str | None  # the /v1 error code, from the trailing metadata `reach-error`
    trailing: dict[str, str]


def refused(call: Any) -> Refused:
    with pytest.raises(grpc.RpcError) as raised:
        call()
    error: Any = raised.value  # a grpc.Call too: code() and trailing_metadata()
    trailing = dict(error.trailing_metadata() or ())
    return Refused(error.code(), trailing.get("reach-error"), trailing)


def served(ingress: Ingress) -> None:
    wait_for(lambda: ingress.gateway.post("/v1/invoke", {"capability": "demo.echo", "payload": {"text": "w"},
                                                         "timeout_ms": 5_000}).status_code == 200,
             60, "demo.echo served", interval=0.5)


def test_a_signed_invoke_completes_and_its_steps_stream_to_the_end(ingress: Ingress) -> None:
    with running(echo_agent()):
        served(ingress)
        reply = ingress.call("Invoke", pb.InvokeRequest(request=echo("hi"), timeout_ms=20_000))
        assert reply.status == "COMPLETED" and MessageToDict(reply.result) == {"text": "hi"}, reply
        exact = ingress.call("Invoke", pb.InvokeRequest(request=pb.SendRequest(
            capability="demo.echo", payload_json='{"text": "exact", "n": 12345678901234567}')))
        assert MessageToDict(exact.result) == {"text": "exact", "n": 12345678901234567.0}

        status = ingress.call("GetStatus", pb.GetStatusRequest(message_id=reply.message_id))
        assert status.status == "COMPLETED" and MessageToDict(status.row)["tenant"] == "default"
        request = pb.WatchStepsRequest(message_id=reply.message_id)
        steps = list(ingress.stub.WatchSteps(request, timeout=60, metadata=ingress.metadata(
            "WatchSteps", request.SerializeToString())))
        assert steps and steps[-1].event == "terminal" and MessageToDict(steps[-1].data)["status"] == "COMPLETED"
        assert [s.index for s in steps if s.event in ("receipt", "terminal")] == list(range(len(steps)))

        # another tenant's app reads the message as absent, by GetStatus and by WatchSteps alike (a refusal that
        # differs from an unknown id would tell it the id exists)
        theirs = refused(lambda: ingress.call("GetStatus", pb.GetStatusRequest(message_id=reply.message_id),
                                              app="rival"))
        unknown = refused(lambda: ingress.call("GetStatus", pb.GetStatusRequest(message_id=f"no-{reply.message_id}"),
                                               app="rival"))
        assert theirs.code == unknown.code == grpc.StatusCode.NOT_FOUND, (theirs, unknown)
        watched = refused(lambda: list(ingress.stub.WatchSteps(request, timeout=60, metadata=ingress.metadata(
            "WatchSteps", request.SerializeToString(), app="rival"))))
        assert watched.code == grpc.StatusCode.NOT_FOUND, watched

        accepted = ingress.call("Send", echo("sent"))
        assert accepted.status_url == f"/v1/messages/{accepted.message_id}"
        wait_for(lambda: (ingress.gateway.get(accepted.status_url).json().get("status") == "COMPLETED"), 30,
                 "the sent message completes")


def test_signatures_quotas_and_sizes_are_checked_as_on_v1(ingress: Ingress, namespace: str) -> None:
    with running(echo_agent()):
        served(ingress)
        topic = Names(namespace).capability("demo.echo")
        before = records_on(topic)
        bad = refused(lambda: ingress.call("Send", echo("forged"), secret="not-the-secret"))
        assert bad.code == grpc.StatusCode.UNAUTHENTICATED, bad
        unsigned = refused(lambda: ingress.stub.Send(echo("unsigned"), timeout=30))
        assert unsigned.code == grpc.StatusCode.UNAUTHENTICATED
        request = echo("replayed")
        headers = ingress.metadata("Send", request.SerializeToString())
        ingress.stub.Send(request, metadata=headers, timeout=30)
        again = refused(lambda: ingress.stub.Send(request, metadata=headers, timeout=30))
        assert (again.code, again.error) == (grpc.StatusCode.UNAUTHENTICATED, "replay")
        status = pb.GetStatusRequest(message_id="x")
        other = refused(lambda: ingress.stub.GetStatus(status, metadata=headers, timeout=30))
        assert other.code == grpc.StatusCode.UNAUTHENTICATED  # the signature was for Send and its bytes only

        ingress.call("Send", echo("first"), app="tiny")
        over = refused(lambda: ingress.call("Send", echo("second"), app="tiny"))
        assert (over.code, over.error) == (grpc.StatusCode.RESOURCE_EXHAUSTED, "quota_exceeded"), over
        assert int(over.trailing["retry-after"]) >= 1

        huge = pb.SendRequest(capability="demo.echo", payload_json=json.dumps({"text": "x" * 400_000}))
        too_big = refused(lambda: ingress.call("Send", huge))
        assert too_big.code == grpc.StatusCode.RESOURCE_EXHAUSTED, too_big  # gRPC's own limit, before any handler
        payload = pb.SendRequest(capability="demo.echo", payload_json=json.dumps({"text": "x" * 270_000}))
        large = refused(lambda: ingress.call("Send", payload))  # the message fits, its payload does not
        assert (large.code, large.error) == (grpc.StatusCode.INVALID_ARGUMENT, "payload_too_large")
        unknown = refused(lambda: ingress.call("GetStatus", pb.GetStatusRequest(message_id="no-such-message")))
        assert unknown.code == grpc.StatusCode.NOT_FOUND
        assert records_on(topic) == before + 2  # the replayed first send and tiny's first: nothing refused was sent


def grpcurl() -> Path | None:
    found = os.environ.get("REACH_GRPCURL") or (str(GRPCURL) if GRPCURL.exists() else shutil.which("grpcurl"))
    return Path(found) if found else None


def test_grpcurl_lists_the_service_by_reflection_and_calls_it_signed(ingress: Ingress) -> None:
    tool = grpcurl()
    if tool is None:
        if os.environ.get("REACH_CI") == "1":
            pytest.fail("grpcurl is not installed: `make setup` builds it from the Go module proxy")
        pytest.skip("grpcurl is not installed (`make setup` builds it)")

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([str(tool), "-plaintext", *args], capture_output=True, text=True, timeout=60)

    listed = run(ingress.address, "list")
    assert "reach.v1.Gateway" in listed.stdout.split(), listed
    described = run(ingress.address, "describe", "reach.v1.Gateway")
    assert "rpc WatchSteps ( .reach.v1.WatchStepsRequest ) returns ( stream .reach.v1.Step )" in described.stdout
    # grpcurl encodes the JSON as the Python client does (fields in number order; no map), so the signature over the
    # Python encoding covers the bytes grpcurl sends
    request = pb.SendRequest(capability="demo.echo", payload_json='{"text": "from grpcurl"}')
    body = json.dumps(MessageToDict(request, preserving_proto_field_name=True))
    headers = [f"{k}: {v}" for k, v in ingress.metadata("Send", request.SerializeToString())]
    with running(echo_agent()):
        served(ingress)
        sent = run("-d", body, "-H", headers[0], "-H", headers[1], ingress.address, "reach.v1.Gateway/Send")
    assert sent.returncode == 0, sent
    answer = json.loads(sent.stdout)
    assert answer["status_url"] == f"/v1/messages/{answer['message_id']}", answer  # grpcurl prints the proto names
    forged = run("-d", body, ingress.address, "reach.v1.Gateway/Send")
    assert forged.returncode != 0 and "Unauthenticated" in forged.stderr, forged


RAW: dict[str, Any] = {"request_serializer": bytes, "response_deserializer": bytes}  # the bytes as they are


def test_a_call_without_credentials_is_refused_before_its_message_is_read(ingress: Ingress) -> None:
    """A caller with no key cannot hold a call open by never finishing its message: the refusal comes from the
    metadata alone (as /v1 screens headers before the body), while the request stream is still open."""
    never = threading.Event()

    def unfinished() -> Iterator[bytes]:
        never.wait(30)  # the message never comes (the test ends the wait once the call is refused)
        yield b""

    # no credentials; and a v1 signature (it names no method, so gRPC never takes it, whatever /v1 is told)
    v1 = (("reach-key", ingress.gateway.apps["shop"]["key_id"]),
          ("reach-signature", f"t={int(time.time())},n=nonce-{uuid.uuid4().hex[:12]},v1={'0' * 64}"))
    for method, metadata in (("Send", ()), ("WatchSteps", ()), ("Send", v1)):
        path = f"/reach.v1.Gateway/{method}"
        if method == "WatchSteps":
            call = ingress.channel.stream_stream(path, **RAW)
            started = time.monotonic()
            with pytest.raises(grpc.RpcError) as raised:
                list(call(unfinished(), timeout=20, metadata=metadata))
        else:
            unary = ingress.channel.stream_unary(path, **RAW)
            started = time.monotonic()
            with pytest.raises(grpc.RpcError) as raised:
                unary(unfinished(), timeout=20, metadata=metadata)
        error: Any = raised.value
        assert error.code() == grpc.StatusCode.UNAUTHENTICATED, (method, error.code(), error.details())
        assert dict(error.trailing_metadata() or ()).get("reach-error"), "the /v1 error code rides along"
        assert time.monotonic() - started < 15, f"{method}: refused only when the deadline ended the call"
    never.set()
