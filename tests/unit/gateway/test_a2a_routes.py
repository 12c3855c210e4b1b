"""The A2A endpoints of the gateway over in-memory fakes, driven by the official a2a-sdk client (ASGI transport)."""

from __future__ import annotations

import asyncio
import dataclasses
import json
from collections.abc import Awaitable, Callable
from typing import Any

import httpx
import pytest
from a2a.client import A2AClientError, ClientConfig, ClientFactory
from a2a.client.interceptors import BeforeArgs, ClientCallInterceptor
from a2a.types.a2a_pb2 import (
    CancelTaskRequest,
    GetTaskRequest,
    Message,
    Part,
    SendMessageRequest,
    StreamResponse,
    TaskPushNotificationConfig,
    TaskState,
)
from a2a.utils.errors import A2AError
from fastapi.testclient import TestClient
from google.protobuf.json_format import MessageToDict
from google.protobuf.struct_pb2 import Struct

from reach.a2a.bearer import a2a_token
from reach.callers import KeyEntry
from reach.cancels import CancelRecord
from reach.channels.settings import ClosureSettings
from reach.gateway.httpsettings import HttpSettings
from reach.gateway.service import build_gateway
from tests.unit.gateway.fakes import Fakes, FakeStatus, app, sign, stream_body

TOKEN = a2a_token("key1", b"secret-1")


class Following(FakeStatus):
    """A message the publisher sent reads ACCEPTED, then STARTED, then COMPLETED with its payload echoed."""

    def __init__(self, fakes: Fakes) -> None:
        super().__init__()
        self.fakes = fakes

    async def message(self, message_id: str) -> tuple[int, dict[str, Any]]:
        sent = {e.message_id: e for e in self.fakes.publisher.sent}
        if message_id in sent and message_id not in self.rows:
            env = sent[message_id]
            base = {"message_id": message_id, "trace_id": env.trace_id, "tenant": env.tenant, "updated_at": 1}
            steps = [{"status": s, "attempt": 1, "generation": 0, "at": i}
                     for i, s in enumerate(("ACCEPTED", "ROUTED", "STARTED", "COMPLETED"))]
            self.rows[message_id] = [{**base, "status": "ACCEPTED", "timeline": steps[:1]},
                                     {**base, "status": "STARTED", "timeline": steps[:3]},
                                     {**base, "status": "COMPLETED", "timeline": steps,
                                      "result": env.payload.decode()}]
        return await super().message(message_id)


class Bearer(ClientCallInterceptor):
    def __init__(self, token: str) -> None:
        self.token = token

    async def before(self, args: BeforeArgs) -> None:
        from a2a.client import ClientCallContext

        args.context = args.context or ClientCallContext()
        args.context.service_parameters = {**(args.context.service_parameters or {}),
                                           "Authorization": f"Bearer {self.token}"}

    async def after(self, args: Any) -> None:
        return None


class Sink:
    """Cancel records produced, in memory."""

    def __init__(self) -> None:
        self.sent: list[CancelRecord] = []

    async def cancel(self, record: CancelRecord) -> None:
        self.sent.append(record)


def run(fakes: Fakes, scenario: Callable[[Callable[..., Awaitable[Any]]], Awaitable[None]],
        sink: Sink | None = None) -> None:
    deps = dataclasses.replace(fakes.deps(), status=fakes.status, directory=fakes.directory, cancels=sink)
    gateway = build_gateway(deps, HttpSettings(sse_poll=0.01, sse_find=0.05, invoke_timeout_ms=2_000),
                            closure=ClosureSettings())

    async def main() -> None:
        http = httpx.AsyncClient(transport=httpx.ASGITransport(app=gateway), base_url="http://gw", timeout=10)

        async def connect(path: str = "", token: str | None = TOKEN, streaming: bool = False) -> Any:
            factory = ClientFactory(ClientConfig(streaming=streaming, httpx_client=http))
            return await factory.create_from_url("http://gw" + path, interceptors=[Bearer(token)] if token else [])

        await scenario(connect)

    asyncio.run(main())


def send_request(payload: str, skill: str | None = "demo.echo", message_id: str | None = None) -> SendMessageRequest:
    """A text message; its message_id (the idempotency key) is `c-<payload>` unless given."""
    meta = Struct()
    if skill:
        meta.update({"skill": skill})
    return SendMessageRequest(message=Message(message_id=message_id or f"c-{payload}", parts=[Part(text=payload)],
                                              metadata=meta))


async def events(client: Any, request: SendMessageRequest) -> list[StreamResponse]:
    return [e async for e in client.send_message(request)]


@pytest.fixture
def fakes() -> Fakes:
    made = Fakes()
    made.status = Following(made)
    return made


def test_send_get_and_stream_over_the_status_table(fakes: Fakes) -> None:
    async def scenario(connect: Callable[..., Awaitable[Any]]) -> None:
        client = await connect()
        [done] = await events(client, send_request("hi"))
        assert done.task.status.state == TaskState.TASK_STATE_COMPLETED
        assert MessageToDict(done.task.artifacts[0].parts[0].data) == {"text": "hi"}
        [envelope] = fakes.publisher.sent
        assert envelope.idempotency_key == "gateway:app1:a2a:c-hi" and envelope.tenant == "acme"
        [again] = await events(client, send_request("hi"))  # the same A2A message again: the same task
        assert again.task.id == done.task.id and len(fakes.publisher.sent) == 1
        [reused] = await events(client, send_request("other", message_id="c-hi"))  # its id, another content
        assert reused.task.status.state == TaskState.TASK_STATE_REJECTED
        assert "idempotency_key_reused" in reused.task.status.message.parts[0].text
        got = await client.get_task(GetTaskRequest(id=done.task.id))
        assert got.status.state == TaskState.TASK_STATE_COMPLETED
        with pytest.raises(A2AError, match="already COMPLETED"):
            await client.cancel_task(CancelTaskRequest(id=done.task.id))
        with pytest.raises(A2AError, match="no task"):
            await client.get_task(GetTaskRequest(id="nope"))
        with pytest.raises(A2AError):
            await client.create_task_push_notification_config(TaskPushNotificationConfig(task_id=done.task.id))
        follow_up = send_request("more")
        follow_up.message.task_id = done.task.id
        with pytest.raises(A2AError, match="not waiting for an answer"):  # a task id answers INPUT_REQUIRED only
            await events(client, follow_up)
        pushed = send_request("hi")
        pushed.configuration.task_push_notification_config.url = "https://caller.example/hook"
        with pytest.raises(A2AError, match="push notifications are not offered"):
            await events(client, pushed)
        assert len(fakes.publisher.sent) == 1

        streaming = await connect("/a2a/cap/demo.echo/", streaming=True)
        stream = await events(streaming, send_request("again", skill=None))
        states = [TaskState.Name(e.task.status.state if e.HasField("task") else e.status_update.status.state)
                  for e in stream if not e.HasField("artifact_update")]
        assert states == ["TASK_STATE_SUBMITTED", "TASK_STATE_WORKING", "TASK_STATE_COMPLETED"]

    run(fakes, scenario)


def test_refusals_another_tenant_and_missing_keys(fakes: Fakes) -> None:
    fakes.directory.keys["key2"] = KeyEntry("key2", app("app2", tenant="globex"), b"secret-2")

    async def scenario(connect: Callable[..., Awaitable[Any]]) -> None:
        client = await connect()
        [rejected] = await events(client, send_request("x", skill="nobody.serves"))
        assert rejected.task.status.state == TaskState.TASK_STATE_REJECTED
        with pytest.raises(A2AError, match="metadata.skill"):
            await events(client, send_request("x", skill=None))
        [done] = await events(client, send_request("mine"))
        rival = await connect(token=a2a_token("key2", b"secret-2"))
        with pytest.raises(A2AError, match="no task"):  # another tenant's task reads as absent
            await rival.get_task(GetTaskRequest(id=done.task.id))
        for token in (None, "key1.wrong"):
            with pytest.raises(A2AClientError, match="HTTP Error 401"):
                await events(await connect(token=token), send_request("x"))
        assert len(fakes.publisher.sent) == 1
        context = done.task.context_id  # the context is the trace: another tenant may not join it
        fakes.status.traces[context] = [done.task.id]
        joining = send_request("join")
        joining.message.context_id = context
        with pytest.raises(A2AError, match="is in use"):
            await events(rival, joining)
        assert len(fakes.publisher.sent) == 1
        again = send_request("mine-again")
        again.message.context_id = context
        [joined] = await events(client, again)  # its own tenant continues its context
        assert joined.task.context_id == context and fakes.publisher.sent[-1].trace_id == context

    run(fakes, scenario)


def test_cards_are_public_and_follow_the_registry(fakes: Fakes) -> None:
    async def scenario(connect: Callable[..., Awaitable[Any]]) -> None:
        http = httpx.AsyncClient(transport=httpx.ASGITransport(app=build_gateway(
            dataclasses.replace(fakes.deps(), directory=fakes.directory), HttpSettings(), closure=ClosureSettings())), base_url="http://gw")
        card = (await http.get("/.well-known/agent-card.json")).json()
        assert [s["id"] for s in card["skills"]] == ["demo.echo"]
        assert (await http.get("/a2a/cap/demo.echo/.well-known/agent-card.json")).status_code == 200
        fakes.catalog.capabilities.clear()  # the last instance left
        assert "skills" not in (await http.get("/.well-known/agent-card.json")).json()
        assert (await http.get("/a2a/cap/demo.echo/.well-known/agent-card.json")).status_code == 404
        metrics = (await http.get("/metrics")).text  # A2A routes are counted by their template, like the rest
        assert 'route="/a2a/cap/{capability}/.well-known/agent-card.json",status="404"' in metrics

    run(fakes, scenario)


def test_cards_advertise_the_configured_url_or_the_socket_never_the_host_header(fakes: Fakes) -> None:
    def card_urls(settings: HttpSettings) -> list[str]:
        gateway = build_gateway(dataclasses.replace(fakes.deps(), directory=fakes.directory), settings,
                                closure=ClosureSettings())
        with TestClient(gateway, base_url="http://gw:8080") as http:
            answers = [http.get(path, headers={"Host": "evil.example"}).json()
                       for path in ("/.well-known/agent-card.json", "/a2a/cap/demo.echo/.well-known/agent-card.json")]
        return [i["url"] for card in answers for i in card["supportedInterfaces"]]

    assert card_urls(HttpSettings()) == ["http://gw:8080/a2a/", "http://gw:8080/a2a/cap/demo.echo/"]
    public = HttpSettings(public_url="https://reach.example.com/base")
    assert card_urls(public) == ["https://reach.example.com/base/a2a/",
                                 "https://reach.example.com/base/a2a/cap/demo.echo/"]
    with pytest.raises(ValueError, match="REACH_GATEWAY_PUBLIC_URL"):
        HttpSettings(public_url="gateway.example.com")


def test_cancel_records_carry_the_apps_tenant_and_refuse_ended_or_foreign_messages() -> None:
    fakes, sink = Fakes(), Sink()
    running = {"message_id": "m1", "trace_id": "t", "tenant": "acme", "status": "STARTED", "timeline": []}
    fakes.status.rows["m1"] = [running, running, {**running, "status": "CANCELED"}]
    fakes.status.rows["m2"] = [{**running, "message_id": "m2", "status": "COMPLETED"}]
    fakes.status.rows["m3"] = [{**running, "message_id": "m3", "tenant": "globex"}]

    async def scenario(connect: Callable[..., Awaitable[Any]]) -> None:
        client = await connect()
        task = await client.cancel_task(CancelTaskRequest(id="m1"))
        assert task.status.state == TaskState.TASK_STATE_CANCELED
        assert [(r.message_id, r.tenant, r.by) for r in sink.sent] == [("m1", "acme", "gateway:app1")]
        with pytest.raises(A2AError, match="no task"):
            await client.cancel_task(CancelTaskRequest(id="m3"))

    run(fakes, scenario, sink)
    http = TestClient(build_gateway(dataclasses.replace(fakes.deps(), cancels=sink), HttpSettings(),
                                  closure=ClosureSettings()))
    def cancel(mid: str, body: bytes) -> Any:
        return http.post(f"/v1/messages/{mid}:cancel", content=body,
                         headers={"Reach-Key": "key1",
                                  "Reach-Signature": sign(b"secret-1", body, target=f"/v1/messages/{mid}:cancel")})

    for mid, code in (("m2", 409), ("m3", 404), ("nope", 404)):
        resp = cancel(mid, json.dumps({"message_id": mid}).encode())
        assert resp.status_code == code, resp.text
    assert http.post("/v1/messages/m2:cancel").status_code == 401
    fakes.status.rows["m4"] = [{**running, "message_id": "m4"}]
    sent = len(sink.sent)
    # a replayed status read's signature (an empty body) or a body naming another message cancels nothing
    for body in (b"", b"{}", json.dumps({"message_id": "m1"}).encode()):
        assert cancel("m4", body).status_code == 400
    assert len(sink.sent) == sent
    resp = cancel("m4", json.dumps({"message_id": "m4"}).encode())
    assert resp.status_code == 202 and resp.json()["status_url"] == "/v1/messages/m4"
    assert sink.sent[-1].message_id == "m4"


def test_an_a2a_body_over_the_limit_is_413_before_it_is_read_whole_or_parsed(fakes: Fakes) -> None:
    """Issue 28, finding 8: a 40 MB A2A body was read and parsed whole while /v1/envelopes answered 413."""
    gateway = build_gateway(dataclasses.replace(fakes.deps(), directory=fakes.directory),
                            HttpSettings(max_body_bytes=64 * 1024), closure=ClosureSettings())
    authorized = {"Authorization": f"Bearer {TOKEN}", "Content-Type": "application/json"}
    streamed = stream_body(gateway, "POST", "/a2a/", authorized, chunk=b" " * 65536, chunks=640)  # 40 MiB
    assert (streamed.status, json.loads(streamed.body)["error"]) == (413, "payload_too_large")
    assert streamed.reads <= 2, "refused as soon as the stream passed the limit"
    declared = stream_body(gateway, "POST", "/a2a/", {**authorized, "Content-Length": str(40 << 20)}, chunks=640)
    assert (declared.status, declared.reads) == (413, 0)
    anonymous = stream_body(gateway, "POST", "/a2a/", {"Content-Type": "application/json"}, chunks=640)
    assert (anonymous.status, anonymous.reads) == (401, 0), "a caller without a token gets no body read at all"
    assert fakes.publisher.sent == []


def test_get_task_takes_the_apps_read_quota(fakes: Fakes) -> None:
    """Issue 28, finding 4: A2A GetTask / SubscribeToTask were reads no quota metered."""
    from tests.unit.gateway.fakes import FakeQuotas

    fakes.quotas = FakeQuotas(read_rate=0.001, read_burst=1)

    async def scenario(connect: Callable[..., Awaitable[Any]]) -> None:
        client = await connect()
        [done] = await events(client, send_request("hi"))  # a send follows its task without a GetTask
        got = await client.get_task(GetTaskRequest(id=done.task.id))
        assert got.status.state == TaskState.TASK_STATE_COMPLETED
        with pytest.raises(A2AClientError, match="429"):
            await client.get_task(GetTaskRequest(id=done.task.id))

    run(fakes, scenario)
