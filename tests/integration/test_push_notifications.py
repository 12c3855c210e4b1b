"""A2A push notifications end to end (issue 26 item 3) on the real broker, Redis, stream app, gateway and webhook
channel agent, with loopback receivers: the official a2a-sdk client sends with a push config; a receiver that fails
its first two deliveries gets every status change of the task exactly once after the retries, signed and with the
A2A token; one that always fails ends in a dead letter with the reason; the configs are set, got, listed and
deleted through the SDK and survive a gateway restart; the gateway's `callback_progress` sends the writer's chunks
to the callback URL, each once."""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from a2a.client import AuthInterceptor, ClientConfig, ClientFactory
from a2a.types.a2a_pb2 import (
    DeleteTaskPushNotificationConfigRequest,
    GetTaskPushNotificationConfigRequest,
    ListTaskPushNotificationConfigsRequest,
    Message,
    Part,
    Role,
    SendMessageRequest,
    TaskPushNotificationConfig,
)
from cryptography.fernet import Fernet
from google.protobuf.json_format import ParseDict
from google.protobuf.struct_pb2 import Struct, Value
from pydantic import SecretStr

from examples.writer_agent import agent as writer_agent
from examples.writer_agent import parts
from reach import control
from reach.a2a import push
from reach.a2a.bearer import a2a_token
from reach.channels import webhooksig
from reach.channels.agent import channel_agent
from reach.channels.settings import ChannelSettings, ClosureSettings
from reach.names import Names
from reach.records import Policy
from reach.settings import KafkaSettings, ReachSettings, RedisSettings
from tests.integration.agent_support import running, wait_for
from tests.integration.channel_servers import Hit, Receiver, listening
from tests.integration.stream_app import StreamApp
from tests.integration.test_channels import echo_agent
from tests.integration.test_gateway_http import Gateway, create_app
from tests.integration.test_multi_turn import Token

pytestmark = pytest.mark.integration
SECRET = "push-webhook-secret"
TOKEN = "receiver-checks-this"


class Flaky(Receiver):
    """Answers 500 to its first `failures` posts to /hook (any notification), 200 after."""

    def __init__(self, failures: int) -> None:
        super().__init__()
        self.failures = failures
        self.answered: list[tuple[int, Hit]] = []
        self._lock = threading.Lock()

    def answer(self, hit: Hit) -> tuple[int, dict[str, Any]]:
        with self._lock:
            status = 500 if hit.path == "/hook" and self.failures > 0 else 200
            self.failures -= status == 500
            self.answered.append((status, hit))
        return status, {"id": "x"} if status == 200 else {"error": "down"}

    def delivered(self, path: str = "/hook") -> list[Hit]:
        return [hit for status, hit in list(self.answered) if status == 200 and hit.path == path]


def serving(app: StreamApp) -> bool:
    try:
        rows = httpx.get(app.url + "/agents", timeout=5).json()
    except (httpx.HTTPError, ValueError):
        return False
    ready = {r["agent_id"] for r in rows if r["state"] == "READY"}
    return {"agent://demo/echo", "agent://demo/writer", "agent://channels/webhook"} <= ready


def row(app: StreamApp, mid: str) -> dict[str, Any] | None:
    got = httpx.get(f"{app.url}/messages/{mid}", timeout=5)
    return got.json() if got.status_code == 200 else None


@pytest.fixture
def gateway(stream_app: StreamApp, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Gateway]:
    monkeypatch.setenv("REACH_GATEWAY_SECRETS_KEY", Fernet.generate_key().decode())
    monkeypatch.setenv("REACH_CHANNEL_WEBHOOK_ALLOW_PRIVATE", "true")  # the receivers are on loopback
    gw = Gateway(tmp_path, {"shop": create_app("shop")})
    gw.start()
    yield gw
    gw.stop()


def request(text: str, url: str, config_id: str) -> SendMessageRequest:
    meta = Struct()
    meta.update({"skill": "demo.echo"})
    sent = SendMessageRequest(message=Message(message_id="", role=Role.ROLE_USER, metadata=meta,
                                              parts=[Part(data=ParseDict({"text": text}, Value()))]))
    sent.configuration.task_push_notification_config.CopyFrom(
        TaskPushNotificationConfig(id=config_id, url=url, token=TOKEN))
    return sent


async def client_of(url: str, token: str) -> Any:
    config = ClientConfig(streaming=False, httpx_client=httpx.AsyncClient(timeout=60))
    return await ClientFactory(config).create_from_url(url, interceptors=[AuthInterceptor(Token(token))])


def test_push_notifications_are_delivered_once_after_retries_and_dead_lettered_when_they_never_pass(
        gateway: Gateway, stream_app: StreamApp, tmp_path: Path) -> None:
    names = Names(ReachSettings().namespace)
    control.publish(control.policy_record(Policy(max_attempts=3, backoff_base_ms=100, backoff_max_ms=300),
                                          scope="channel.webhook"), names=names, kafka=KafkaSettings())
    webhook = channel_agent("webhook", settings=ChannelSettings(webhook_secret=SecretStr(SECRET), timeout_s=2,
                                                                webhook_allow_private=True),
                            kafka=KafkaSettings(), redis=RedisSettings(), reach=ReachSettings(),
                            closure=ClosureSettings())
    token = a2a_token(gateway.apps["shop"]["key_id"], gateway.apps["shop"]["secret"].encode())
    with listening(Flaky(2)) as flaky, listening(Flaky(10_000)) as down, running(echo_agent()), running(webhook), \
            running(writer_agent):
        wait_for(lambda: serving(stream_app), 60, "the echo, writer and webhook agents READY", interval=0.5)

        async def send_both() -> tuple[str, str]:
            client = await client_of(gateway.url, token)
            [first] = [e async for e in client.send_message(request("hi", f"{flaky.url}/hook", "flaky"))]
            [second] = [e async for e in client.send_message(request("lo", f"{down.url}/hook", "down"))]
            return first.task.id, second.task.id

        task_id, down_id = asyncio.run(send_both())
        final = wait_for(lambda: (r := row(stream_app, task_id)) and r["status"] == "COMPLETED" and r, 60,
                         "the task COMPLETED")
        owed = push.notifications(final, push.PushConfig(id="flaky", url=f"{flaky.url}/hook"))
        assert len(owed) >= 4, owed  # submitted, working, the result artifact, completed
        wanted = {n.message_id for n in owed}
        wait_for(lambda: {h.headers["Reach-Message-Id"] for h in flaky.delivered()} >= wanted, 90,
                 "every status change at the receiver")
        delivered = flaky.delivered()
        ids = [h.headers["Reach-Message-Id"] for h in delivered]
        assert sorted(ids) == sorted(wanted), ids  # each exactly once, nothing else
        assert [status for status, _ in flaky.answered].count(500) == 2
        for hit in delivered:
            assert hit.headers[push.TOKEN_HEADER] == TOKEN
            assert webhooksig.verify(webhooksig.tenant_secret(SECRET.encode(), hit.headers["Reach-Tenant"]),
                                     hit.headers["Reach-Signature"], tenant=hit.headers["Reach-Tenant"],
                                     url=f"{flaky.url}/hook", body=hit.body, now=int(time.time()))
        states = [json.loads(h.body)["statusUpdate"]["status"]["state"] for h in delivered
                  if "statusUpdate" in json.loads(h.body)]
        assert set(states) == {"TASK_STATE_SUBMITTED", "TASK_STATE_WORKING", "TASK_STATE_COMPLETED"}, states
        bodies = [json.loads(h.body) for h in delivered]
        artifact = next(b["artifactUpdate"] for b in bodies if "artifactUpdate" in b)
        assert artifact["taskId"] == task_id and artifact["artifact"]["parts"][0]["data"] == {"text": "hi"}

        # the receiver that never answers 2xx: each notification is retried, then dead-lettered with the reason
        first_down = push.notification_id(down_id, "down", 0, False)
        letter = wait_for(lambda: (r := row(stream_app, first_down)) and r["status"] == "DEAD_LETTERED" and r, 90,
                          "the notification to the failing receiver DEAD_LETTERED")
        reason = letter["last_error"]["message"]
        assert letter["last_error"]["code"] == "RETRIES_EXHAUSTED" and "3 of 3 attempts failed" in reason
        # the last reason: the receiver's 500, or the channel's health for that receiver, opened by its 500s
        assert "HTTP_500" in reason or "CHANNEL_OPEN" in reason, reason
        assert [status for status, _ in down.answered].count(500) >= 2

        # the gateway's callback_progress: the writer's chunks reach the callback URL as they come, then the ending
        sent = gateway.post("/v1/envelopes", {"capability": "demo.write", "payload": {"topic": "Kafka"},
                                              "callback": f"{flaky.url}/progress", "callback_progress": True})
        assert sent.status_code == 202, sent.text
        mid = sent.json()["message_id"]
        ending = wait_for(lambda: [b for b in map(json.loads, (h.body for h in flaky.delivered("/progress")))
                                   if b.get("status") == "COMPLETED"], 90, "the callback of the streamed answer")
        assert ending[0]["message_id"] == mid
        wait_for(lambda: len({json.loads(h.body).get("seq") for h in flaky.delivered("/progress")
                              if json.loads(h.body).get("event") == "chunk"}) == 5, 30, "the 5 chunks")
        chunk_bodies = [b for b in map(json.loads, (h.body for h in flaky.delivered("/progress")))
                        if b.get("event") == "chunk"]
        by_seq = {b["seq"]: b["data"] for b in chunk_bodies}
        assert [by_seq[i] for i in sorted(by_seq)] == parts("Kafka") and len(chunk_bodies) == 5  # each once
        assert letter["trace_id"] == row(stream_app, down_id)["trace_id"]  # type: ignore[index]

    # the configs through the SDK, and after a gateway restart
    async def manage(url: str) -> list[str]:
        client = await client_of(url, token)
        got = await client.get_task_push_notification_config(
            GetTaskPushNotificationConfigRequest(task_id=task_id, id="flaky"))
        assert got.url == f"{flaky.url}/hook" and got.token == TOKEN
        await client.create_task_push_notification_config(
            TaskPushNotificationConfig(task_id=task_id, id="second", url="https://receiver.example/a2a", token="t2"))
        listed = await client.list_task_push_notification_configs(
            ListTaskPushNotificationConfigsRequest(task_id=task_id))
        await client.delete_task_push_notification_config(
            DeleteTaskPushNotificationConfigRequest(task_id=task_id, id="second"))
        return sorted(c.id for c in listed.configs)

    assert asyncio.run(manage(gateway.url)) == ["flaky", "second"]
    gateway.stop()
    again = Gateway(tmp_path, gateway.apps)
    again.start()
    try:
        async def after_restart() -> list[str]:
            client = await client_of(again.url, token)
            listed = await client.list_task_push_notification_configs(
                ListTaskPushNotificationConfigsRequest(task_id=task_id))
            return sorted(c.id for c in listed.configs)

        assert asyncio.run(after_restart()) == ["flaky"]
    finally:
        again.stop()


def test_a_task_running_across_a_gateway_restart_reports_every_change_once(
        gateway: Gateway, stream_app: StreamApp, tmp_path: Path) -> None:
    """The sender's offsets are its group's: a gateway stopped right after the send, and another started, still
    delivers each of the task's changes once (those folded while no gateway ran included)."""
    webhook = channel_agent("webhook", settings=ChannelSettings(webhook_secret=SecretStr(SECRET), timeout_s=2,
                                                                webhook_allow_private=True),
                            kafka=KafkaSettings(), redis=RedisSettings(), reach=ReachSettings(),
                            closure=ClosureSettings())
    token = a2a_token(gateway.apps["shop"]["key_id"], gateway.apps["shop"]["secret"].encode())
    with listening(Flaky(0)) as receiver, running(echo_agent()), running(webhook), running(writer_agent):
        wait_for(lambda: serving(stream_app), 60, "the echo, writer and webhook agents READY", interval=0.5)

        async def warm_up() -> None:  # one task end to end: the sender's group has committed offsets
            client = await client_of(gateway.url, token)
            [e async for e in client.send_message(request("warm", f"{receiver.url}/warm", "w"))]

        asyncio.run(warm_up())
        wait_for(lambda: len(receiver.delivered("/warm")) >= 4, 60, "the warm-up's notifications")

        async def send_writer() -> str:
            client = await client_of(gateway.url, token)
            sent = request("", f"{receiver.url}/hook", "restart")
            sent.message.metadata.update({"skill": "demo.write"})
            sent.message.parts[0].data.Clear()
            sent.message.parts[0].data.struct_value.update({"topic": "Kafka"})
            sent.configuration.return_immediately = True
            [first] = [e async for e in client.send_message(sent)]
            return str(first.task.id)

        task_id = asyncio.run(send_writer())
        gateway.stop()  # the writer takes a second: most of its changes are folded while no gateway runs
        again = Gateway(tmp_path, gateway.apps)
        again.start()
        try:
            final = wait_for(lambda: (r := row(stream_app, task_id)) and r["status"] == "COMPLETED" and r, 60,
                             "the writer's task COMPLETED")
            wanted = {n.message_id for n in push.notifications(final, push.PushConfig(id="restart", url=""))}
            wait_for(lambda: {h.headers["Reach-Message-Id"] for h in receiver.delivered()} >= wanted, 90,
                     "every change of the task at the receiver")
            ids = [h.headers["Reach-Message-Id"] for h in receiver.delivered()]
            assert sorted(ids) == sorted(wanted), ids  # each once, though two gateways produced some of them
        finally:
            again.stop()
