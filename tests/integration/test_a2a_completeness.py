"""A2A completeness end to end (issue 26 item 4, decisions/0047) on the real broker, Redis, stream app and gateway,
with the official a2a-sdk client: ListTasks without a context lists the tenant's tasks newest update first, paged;
a handler's NeedsAuth reads auth-required and is answered with the task id; a push config set while the task runs,
with the push-progress extension, gets every change of state once and the handler's chunks."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from typing import Any

import pytest
from a2a.client.client import ClientCallContext
from a2a.client.service_parameters import ServiceParametersFactory, with_a2a_extensions
from a2a.types.a2a_pb2 import (
    ListTasksRequest,
    Message,
    Part,
    Role,
    SendMessageRequest,
    TaskPushNotificationConfig,
    TaskState,
)
from google.protobuf.json_format import MessageToDict, ParseDict
from google.protobuf.struct_pb2 import Struct, Value
from pydantic import SecretStr

from examples.writer_agent import agent as writer_agent
from examples.writer_agent import parts
from reach.a2a import cards, push
from reach.agent import Agent, Context, NeedsAuth
from reach.channels.agent import channel_agent
from reach.channels.settings import ChannelSettings, ClosureSettings
from reach.settings import KafkaSettings, ReachSettings, RedisSettings
from tests.integration.agent_support import running, wait_for
from tests.integration.channel_servers import listening
from tests.integration.gateway_fixtures import gateway, row_of, sdk_client, shop_token
from tests.integration.stream_app import StreamApp
from tests.integration.test_channels import echo_agent
from tests.integration.test_gateway_http import Gateway
from tests.integration.test_push_notifications import Flaky, serving

pytestmark = pytest.mark.integration
__all__ = ["gateway"]
GRANT = {"type": "object", "required": ["grant"], "properties": {"grant": {"type": "string", "minLength": 1}}}
ASK = "Approve the charge of 12 EUR at https://pay.example/approve/42, then send the grant id"


@pytest.fixture(autouse=True)
def loopback_receivers(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setenv("REACH_CHANNEL_WEBHOOK_ALLOW_PRIVATE", "true")  # before the gateway starts
    yield


def approver() -> Agent:
    agent = Agent("agent://test/approver", region="local", max_concurrency=4)

    @agent.capability("test.approve", version="1.0.0", input_schema={"type": "object"})
    async def approve(_payload: dict[str, Any], ctx: Context) -> dict[str, Any] | NeedsAuth:
        if not ctx.turns:
            return NeedsAuth(ASK, GRANT)
        return {"charged": True, "grant": ctx.turns[-1].answer["grant"]}

    return agent


def message(skill: str, value: dict[str, Any], *, task_id: str = "", context_id: str = "") -> SendMessageRequest:
    meta = Struct()
    meta.update({"skill": skill})
    return SendMessageRequest(message=Message(message_id="", role=Role.ROLE_USER, metadata=meta, task_id=task_id,
                                              context_id=context_id, parts=[Part(data=ParseDict(value, Value()))]))


def ready(gateway: Gateway, capability: str, payload: dict[str, Any]) -> None:
    """Wait until a blocking invoke of the capability is answered (it ended, or asks back): nothing of it is left
    running to change the order of what the test sends next."""
    def served() -> bool:
        resp = gateway.post("/v1/invoke", {"capability": capability, "payload": payload, "timeout_ms": 5_000})
        return resp.status_code in (200, 202)
    wait_for(served, 60, f"{capability} served", interval=0.5)


def test_tasks_are_listed_without_a_context_and_auth_required_is_answered_with_the_task_id(
        gateway: Gateway) -> None:
    with running(echo_agent()), running(approver()):
        ready(gateway, "demo.echo", {"warm": True})
        ready(gateway, "test.approve", {})
        asyncio.run(list_and_authorize(gateway.url, shop_token(gateway)))


async def list_and_authorize(url: str, token: str) -> None:
    client = await sdk_client(url, token)
    sent = []
    for n in range(3):  # each in a context of its own: no context_id can list them together
        [done] = [e async for e in client.send_message(message("demo.echo", {"n": n}, context_id=f"c-{n}"))]
        assert done.task.status.state == TaskState.TASK_STATE_COMPLETED, done.task.status
        sent.append(done.task.id)
    newest_first = list(reversed(sent))

    def listed(page: Any) -> list[str]:
        return [t.id for t in page.tasks if t.id in sent]

    first = await client.list_tasks(ListTasksRequest(page_size=2))
    assert first.total_size >= 3 and first.next_page_token
    assert listed(first) == newest_first[:2], [t.id for t in first.tasks]  # nothing else ran since
    rest = await client.list_tasks(ListTasksRequest(page_size=100, page_token=first.next_page_token))
    assert listed(rest)[:1] == newest_first[2:] and not set(listed(first)) & set(listed(rest))
    done = await client.list_tasks(ListTasksRequest(status=TaskState.TASK_STATE_COMPLETED, include_artifacts=True))
    assert set(sent) <= {t.id for t in done.tasks} and all(t.artifacts for t in done.tasks if t.id in sent)
    one = await client.list_tasks(ListTasksRequest(context_id="c-1"))
    assert [t.id for t in one.tasks] == [sent[1]]

    [asked] = [e async for e in client.send_message(message("test.approve", {}))]
    task = asked.task
    assert task.status.state == TaskState.TASK_STATE_AUTH_REQUIRED, task.status
    assert task.status.message.parts[0].text == ASK
    assert MessageToDict(task.status.message.parts[1].data)["answer_schema"]["required"] == ["grant"]
    waiting = await client.list_tasks(ListTasksRequest(status=TaskState.TASK_STATE_AUTH_REQUIRED))
    assert task.id in {t.id for t in waiting.tasks}
    [granted] = [e async for e in client.send_message(message("test.approve", {"grant": "g-42"}, task_id=task.id))]
    assert granted.task.status.state == TaskState.TASK_STATE_COMPLETED, granted.task.status
    assert MessageToDict(granted.task.artifacts[0].parts[0].data) == {"charged": True, "grant": "g-42"}


def test_a_config_set_while_the_task_runs_with_push_progress_gets_each_change_once_and_the_chunks(
        gateway: Gateway, stream_app: StreamApp) -> None:
    webhook = channel_agent("webhook", settings=ChannelSettings(webhook_secret=SecretStr("wh"), timeout_s=2,
                                                                webhook_allow_private=True),
                            kafka=KafkaSettings(), redis=RedisSettings(), reach=ReachSettings(),
                            closure=ClosureSettings())
    token = shop_token(gateway)
    with listening(Flaky(0)) as receiver, running(echo_agent()), running(writer_agent), running(webhook):
        ready(gateway, "demo.write", {"topic": "warm"})
        wait_for(lambda: serving(stream_app), 60, "the echo, writer and webhook agents READY", interval=0.5)

        async def warm_up() -> None:  # one task end to end: the push sender's group has committed offsets
            client = await sdk_client(gateway.url, token)
            sent = message("demo.echo", {"warm": 1})
            sent.configuration.task_push_notification_config.CopyFrom(
                TaskPushNotificationConfig(url=f"{receiver.url}/warm"))
            [e async for e in client.send_message(sent)]

        asyncio.run(warm_up())
        wait_for(lambda: len(receiver.delivered("/warm")) >= 4, 90, "the warm-up's notifications")

        async def set_while_running() -> str:
            client = await sdk_client(gateway.url, token)
            sent = message("demo.write", {"topic": "Kafka"})
            sent.configuration.return_immediately = True
            [first] = [e async for e in client.send_message(sent)]
            progress = ClientCallContext(service_parameters=ServiceParametersFactory.create(
                [with_a2a_extensions([cards.PUSH_PROGRESS_EXTENSION])]))
            # set at once, while the writer runs and its changes are being folded (the race of decisions/0042)
            await client.create_task_push_notification_config(
                TaskPushNotificationConfig(task_id=first.task.id, id="live", url=f"{receiver.url}/hook"),
                context=progress)
            return str(first.task.id)

        task_id = asyncio.run(set_while_running())
        final = wait_for(lambda: (r := row_of(gateway, task_id)) and r["status"] == "COMPLETED" and r, 60,
                         "the writer's task COMPLETED")
        owed = push.notifications(final, push.PushConfig(id="live", url="", progress=True))
        states = {n.message_id for n in owed if "statusUpdate" in n.body or "artifactUpdate" in n.body}
        wait_for(lambda: {h.headers["Reach-Message-Id"] for h in receiver.delivered()} >= states, 90,
                 "every change of the task at the receiver")
        wait_for(lambda: len({json.loads(h.body).get("seq") for h in receiver.delivered()
                              if json.loads(h.body).get("event") == "chunk"}) == 5, 60, "the 5 chunks")
        bodies = [json.loads(h.body) for h in receiver.delivered()]
        ids = [h.headers["Reach-Message-Id"] for h in receiver.delivered()]
        assert len(ids) == len(set(ids)), ids  # each notification once
        seen = [b["statusUpdate"]["status"]["state"] for b in bodies if "statusUpdate" in b]
        assert set(seen) == {"TASK_STATE_SUBMITTED", "TASK_STATE_WORKING", "TASK_STATE_COMPLETED"}, seen
        chunks = {b["seq"]: b["data"] for b in bodies if b.get("event") == "chunk"}
        assert [chunks[i] for i in sorted(chunks)] == parts("Kafka")
