"""A2A over Kafka end to end: the official a2a-sdk client, unmodified, against a real `reach gateway` process,
router, broker, Redis and in-process agents. One module-scoped set-up serves every test (CI time budget)."""

from __future__ import annotations

import asyncio
import contextlib
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import httpx
import pytest
from a2a.client import A2AClientError, AuthInterceptor, ClientCallContext, ClientConfig, ClientFactory
from a2a.client.auth.credentials import CredentialService
from a2a.types.a2a_pb2 import (
    CancelTaskRequest,
    GetTaskRequest,
    Message,
    Part,
    Role,
    SendMessageConfiguration,
    SendMessageRequest,
    StreamResponse,
    Task,
    TaskState,
)
from cryptography.fernet import Fernet
from google.protobuf.json_format import MessageToDict, ParseDict
from google.protobuf.struct_pb2 import Struct, Value

from reach.a2a.bearer import SCHEME, a2a_token
from reach.agent import Agent, Canceled, TransientError
from reach.agent.agent import Context
from tests.integration.a2a_server import UpperServer
from tests.integration.agent_support import reach_cli, running, wait_for
from tests.integration.conftest import Infra, fresh_namespace
from tests.integration.stream_app import ROOT, StreamApp
from tests.integration.test_gateway_http import Gateway, create_app

pytestmark = pytest.mark.integration


def mesh_agent() -> Agent:
    """One instance, one message at a time (the tests run one after another): a second demo.hold waits
    unstarted behind the first."""
    agent = Agent("agent://demo/a2a", region="local", max_concurrency=1, max_queue=4, execution_timeout_ms=90_000)

    @agent.capability("demo.echo", version="1.0.0", tags=["demo"], examples=[{"text": "hi"}], input_schema={
        "type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]})
    async def echo(payload: dict[str, Any]) -> dict[str, Any]:
        return payload

    @agent.capability("demo.flaky", version="1.0.0")
    async def flaky(payload: dict[str, Any], ctx: Context) -> dict[str, Any]:
        if ctx.attempt < 3:
            raise TransientError(f"attempt {ctx.attempt} fails on purpose")
        return {"attempt": ctx.attempt}

    @agent.capability("demo.hold", version="1.0.0")
    async def hold(payload: dict[str, Any], ctx: Context) -> dict[str, Any]:
        HELD.append(int(payload["n"]))
        give_up = time.monotonic() + 60  # well past any wait of the test, inside the execution timeout
        while time.monotonic() < give_up:
            if ctx.cancelled:
                raise Canceled("stopped on request")
            await asyncio.sleep(0.05)
        return {"n": payload["n"]}

    return agent


HELD: list[int] = []  # the n of every demo.hold run that started


@dataclass
class Mesh:
    namespace: str
    gateway: Gateway
    token: str

    @property
    def url(self) -> str:
        return self.gateway.url


@pytest.fixture(scope="module")
def mesh(infra: Infra, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Mesh]:
    with pytest.MonkeyPatch.context() as patch, contextlib.ExitStack() as stack:
        namespace = stack.enter_context(contextlib.contextmanager(fresh_namespace)(infra, patch))
        patch.setenv("REACH_GATEWAY_SECRETS_KEY", Fernet.generate_key().decode())
        logs = tmp_path_factory.mktemp("a2a")
        shop = create_app("shop")
        upper = UpperServer().start()
        stack.callback(upper.stop)
        router = StreamApp(logs)
        patch.setenv("REACH_WEB_PORT", str(router.port))
        bridge = subprocess.Popen([sys.executable, "-m", "reach", "a2a", "bridge", "--url", upper.url,
                                   "--capability", "ext.upper"], cwd=ROOT, stdout=subprocess.DEVNULL,
                                  stderr=stack.enter_context(open(logs / "bridge.log", "wb")))  # beside the router
        stack.callback(stop_process, bridge)
        stack.enter_context(running(mesh_agent()))  # registers while the router starts: it reads the registry
        router.start()
        stack.callback(router.stop)
        gateway = Gateway(logs, {"shop": shop})
        stack.callback(gateway.stop)
        gateway.start()
        mesh = Mesh(namespace, gateway, a2a_token(shop["key_id"], shop["secret"].encode()))
        wanted = {"demo.echo", "demo.flaky", "demo.hold", "ext.upper"}
        wait_for(lambda: wanted <= set(skills(mesh)), 60, "the skills on the card")
        yield mesh


def stop_process(proc: subprocess.Popen[bytes]) -> None:
    proc.terminate()
    try:
        proc.wait(30)
    except subprocess.TimeoutExpired:
        proc.kill()


def skills(mesh: Mesh) -> list[str]:
    card = httpx.get(mesh.url + "/.well-known/agent-card.json", timeout=10).json()
    return [s["id"] for s in card.get("skills", [])]


class Token(CredentialService):
    """The app key as the card's bearer scheme asks for it."""

    def __init__(self, token: str) -> None:
        self.token = token

    async def get_credentials(self, security_scheme_name: str, context: ClientCallContext | None) -> str | None:
        return self.token if security_scheme_name == SCHEME else None


async def connect(url: str, token: str | None, *, streaming: bool = False) -> Any:
    config = ClientConfig(streaming=streaming, httpx_client=httpx.AsyncClient(timeout=60))
    interceptors = [AuthInterceptor(Token(token))] if token is not None else []
    return await ClientFactory(config).create_from_url(url, interceptors=interceptors)


def message(payload: dict[str, Any], skill: str | None = None, context_id: str = "") -> SendMessageRequest:
    meta = Struct()
    if skill:
        meta.update({"skill": skill})
    return SendMessageRequest(message=Message(message_id="", role=Role.ROLE_USER, context_id=context_id,
                                              parts=[Part(data=ParseDict(payload, Value()))], metadata=meta))


async def send(client: Any, request: SendMessageRequest) -> list[StreamResponse]:
    return [event async for event in client.send_message(request)]


def final_task(events: list[StreamResponse]) -> Task:
    assert events and events[-1].HasField("task"), events
    return events[-1].task


def result_of(task: Task) -> Any:
    return MessageToDict(task.artifacts[0].parts[0].data)


def state(task: Task) -> str:
    return TaskState.Name(task.status.state)


def test_the_mesh_card_send_get_and_stream(mesh: Mesh) -> None:
    card = httpx.get(mesh.url + "/.well-known/agent-card.json").json()
    # push notification configs are kept (the namespace has its push topic), and the bus is a second interface
    assert card["capabilities"]["pushNotifications"] is True and card["capabilities"]["streaming"] is True
    assert [i["protocolBinding"] for i in card["supportedInterfaces"]] == ["JSONRPC", "urn:agent-reach:a2a-kafka:v1"]
    assert card["securitySchemes"][SCHEME]["httpAuthSecurityScheme"]["scheme"] == "bearer"

    async def scenario() -> None:
        client = await connect(mesh.url, mesh.token)
        task = final_task(await send(client, message({"text": "hi"}, skill="demo.echo", context_id="chat-1")))
        assert state(task) == "TASK_STATE_COMPLETED" and result_of(task) == {"text": "hi"}
        assert task.context_id == "chat-1"
        again = await client.get_task(GetTaskRequest(id=task.id))
        assert again.id == task.id and state(again) == "TASK_STATE_COMPLETED" and result_of(again) == {"text": "hi"}
        assert [m.metadata["status"] for m in again.history][-1] == "COMPLETED"

        streaming = await connect(mesh.url, mesh.token, streaming=True)
        events = await send(streaming, message({"text": "streamed"}, skill="demo.echo"))
        states = [TaskState.Name(e.task.status.state if e.HasField("task") else e.status_update.status.state)
                  for e in events if e.HasField("task") or e.HasField("status_update")]
        assert states == ["TASK_STATE_SUBMITTED", "TASK_STATE_WORKING", "TASK_STATE_COMPLETED"], states
        artifacts = [e.artifact_update.artifact for e in events if e.HasField("artifact_update")]
        assert [MessageToDict(a.parts[0].data) for a in artifacts] == [{"text": "streamed"}]

        # the capability's own endpoint and card: no metadata.skill needed
        direct = await connect(mesh.url + "/a2a/cap/demo.echo/", mesh.token)
        task = final_task(await send(direct, message({"text": "direct"})))
        assert result_of(task) == {"text": "direct"}

    asyncio.run(scenario())


def test_nobody_serves_is_rejected_and_a_flaky_skill_completes_after_retries(mesh: Mesh) -> None:
    async def scenario() -> None:
        client = await connect(mesh.url, mesh.token)
        rejected = final_task(await send(client, message({}, skill="nobody.serves")))
        assert state(rejected) == "TASK_STATE_REJECTED"
        assert "unknown_capability" in rejected.status.message.parts[0].text

        task = final_task(await send(client, message({}, skill="demo.flaky")))
        assert state(task) == "TASK_STATE_COMPLETED" and result_of(task) == {"attempt": 3}
        steps = [(m.metadata["status"], int(m.metadata["attempt"])) for m in task.history]
        assert ("ATTEMPT_FAILED", 1) in steps and ("ATTEMPT_FAILED", 2) in steps and ("STARTED", 3) in steps

    asyncio.run(scenario())


def test_a_wrong_or_missing_app_key_is_unauthenticated(mesh: Mesh) -> None:
    async def scenario() -> None:
        key_id = mesh.token.partition(".")[0]
        for token in (None, f"{key_id}.rs_wrong", "not-a-token"):
            client = await connect(mesh.url, token)
            with pytest.raises(A2AClientError, match="HTTP Error 401"):
                await send(client, message({"text": "hi"}, skill="demo.echo"))

    asyncio.run(scenario())
    raw = httpx.post(mesh.url + "/a2a/", json={"jsonrpc": "2.0", "id": 1, "method": "GetTask", "params": {"id": "x"}})
    assert raw.status_code == 401 and raw.headers["WWW-Authenticate"].startswith("Bearer")




def test_cancel_before_start_skips_the_handler_and_a_running_handler_sees_it(mesh: Mesh) -> None:
    async def scenario() -> None:
        client = await connect(mesh.url + "/a2a/cap/demo.hold/", mesh.token)

        async def submit(n: int) -> Task:
            request = message({"n": n})
            request.configuration.CopyFrom(SendMessageConfiguration(return_immediately=True))
            return final_task(await send(client, request))

        async def until(task_id: str, wanted: str) -> Task:
            for _ in range(300):
                got = await client.get_task(GetTaskRequest(id=task_id))
                if state(got) == wanted:
                    return got
                await asyncio.sleep(0.1)
            raise AssertionError(f"{task_id} never reached {wanted}: {got}")

        first = await submit(1)
        await until(first.id, "TASK_STATE_WORKING")
        second = await submit(2)  # waits behind the first: max_concurrency 1
        cancelled = reach_cli("cancel", second.id, "--json")  # an operator's cancel, acked before it returns
        assert cancelled.returncode == 0, cancelled.stderr
        after = await client.cancel_task(CancelTaskRequest(id=first.id))  # the first is running: ctx.cancelled
        assert state(after) in ("TASK_STATE_WORKING", "TASK_STATE_CANCELED"), after  # as it is after 5 s at most
        await until(first.id, "TASK_STATE_CANCELED")
        skipped = await until(second.id, "TASK_STATE_CANCELED")
        assert "STARTED" not in [m.metadata["status"] for m in skipped.history]
        assert 2 not in HELD  # the second message's handler never ran
        done = mesh.gateway.post(f"/v1/messages/{first.id}:cancel", {"message_id": first.id})
        assert done.status_code == 409 and done.json()["error"] == "terminal"

    asyncio.run(scenario())


def test_an_sdk_built_a2a_server_is_bridged_onto_the_bus(mesh: Mesh) -> None:
    async def scenario() -> Task:
        client = await connect(mesh.url + "/a2a/cap/ext.upper/", mesh.token)
        request = SendMessageRequest(message=Message(message_id="", role=Role.ROLE_USER, parts=[Part(text="hello")]))
        task = final_task(await send(client, request))
        assert state(task) == "TASK_STATE_COMPLETED" and result_of(task) == {"upper": "HELLO"}
        failed = final_task(await send(client, SendMessageRequest(message=Message(
            message_id="", role=Role.ROLE_USER, parts=[Part(text="fail")]))))
        assert state(failed) == "TASK_STATE_FAILED" and "asked to fail" in failed.status.message.parts[0].text
        return task

    task = asyncio.run(scenario())
    row = mesh.gateway.get(f"/v1/messages/{task.id}").json()  # the receipts, as the status table folded them
    assert row["agent_id"] == "agent://a2a/ext-upper" and row["status"] == "COMPLETED"
    assert [s["status"] for s in row["timeline"]][-2:] == ["STARTED", "COMPLETED"]


def test_a_bridged_agent_s_question_is_asked_of_the_caller_and_the_answer_reaches_the_remote_task(mesh: Mesh) -> None:
    async def scenario() -> tuple[Task, Task]:
        client = await connect(mesh.url + "/a2a/cap/ext.upper/", mesh.token)
        asked = final_task(await send(client, SendMessageRequest(message=Message(
            message_id="", role=Role.ROLE_USER, parts=[Part(text="ask")]))))
        assert state(asked) == "TASK_STATE_INPUT_REQUIRED", asked.status
        assert asked.status.message.parts[0].text == "Which city?"
        done = final_task(await send(client, SendMessageRequest(message=Message(
            message_id="", role=Role.ROLE_USER, task_id=asked.id, parts=[Part(text="oslo")]))))
        return asked, done

    asked, done = asyncio.run(scenario())
    assert state(done) == "TASK_STATE_COMPLETED", done.status
    assert result_of(done) == {"upper": "OSLO", "answered": True}, "the remote task that asked got the answer"
    assert done.id == asked.id
    row = mesh.gateway.get(f"/v1/messages/{asked.id}").json()
    steps = [s["status"] for s in row["timeline"]]
    assert "INPUT_REQUIRED" in steps and steps[-1] == "COMPLETED" and row["agent_id"] == "agent://a2a/ext-upper"
