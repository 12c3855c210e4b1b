"""A2A push notification configs at the gateway over in-memory fakes (reach.a2a.pushbook.MemoryPushBook), driven by
the official a2a-sdk client: a send with a config keeps it and hands the task's row to the sender; set, get, list
(paged) and delete; another tenant's task reads as absent; a non-public URL and the config past the per-task cap
are refused with the reason; the card says push notifications are offered and names the A2A-over-Kafka
interface."""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Awaitable, Callable
from typing import Any

import httpx
import pytest
from a2a.types.a2a_pb2 import (
    DeleteTaskPushNotificationConfigRequest,
    GetTaskPushNotificationConfigRequest,
    ListTaskPushNotificationConfigsRequest,
    TaskPushNotificationConfig,
)
from a2a.utils.errors import A2AError

from reach.a2a import cards, push
from reach.a2a.bearer import a2a_token
from reach.a2a.pushbook import MemoryPushBook
from reach.callers import KeyEntry
from reach.channels.settings import ClosureSettings
from reach.gateway.httpsettings import HttpSettings
from reach.gateway.service import build_gateway
from tests.unit.gateway.fakes import Fakes, app
from tests.unit.gateway.test_a2a_routes import Bearer, Following, events, send_request

TOKEN = a2a_token("key1", b"secret-1")
URL = "https://receiver.example/a2a"


def run(fakes: Fakes, book: MemoryPushBook, scenario: Callable[[Callable[..., Awaitable[Any]]], Awaitable[None]]
        ) -> None:
    deps = dataclasses.replace(fakes.deps(), status=fakes.status, directory=fakes.directory, push=book,
                               namespace="reach")
    gateway = build_gateway(deps, HttpSettings(sse_poll=0.01, sse_find=0.05, invoke_timeout_ms=2_000),
                            closure=ClosureSettings())

    async def main() -> None:
        http = httpx.AsyncClient(transport=httpx.ASGITransport(app=gateway), base_url="http://gw", timeout=10)

        async def connect(token: str = TOKEN) -> Any:
            from a2a.client import ClientConfig, ClientFactory

            factory = ClientFactory(ClientConfig(streaming=False, httpx_client=http))
            return await factory.create_from_url("http://gw", interceptors=[Bearer(token)])

        await scenario(connect)
        card = (await http.get("/.well-known/agent-card.json")).json()
        assert card["capabilities"]["pushNotifications"] is True
        # JSON-RPC first (what the SDK client picked above), then the bus itself
        assert [(i["protocolBinding"], i["url"]) for i in card["supportedInterfaces"]][1:] == [
            (cards.KAFKA_BINDING, "kafka:reach")]
        assert card["supportedInterfaces"][0]["protocolBinding"] == "JSONRPC"

    asyncio.run(main())


@pytest.fixture
def fakes() -> Fakes:
    made = Fakes()
    made.status = Following(made)
    return made


def test_a_send_with_a_config_keeps_it_and_the_configs_are_set_got_listed_and_deleted(fakes: Fakes) -> None:
    book = MemoryPushBook()
    fakes.directory.keys["key2"] = KeyEntry("key2", app("app2", tenant="globex"), b"secret-2")

    async def scenario(connect: Callable[..., Awaitable[Any]]) -> None:
        client = await connect()
        sent = send_request("hi")
        sent.configuration.task_push_notification_config.CopyFrom(TaskPushNotificationConfig(url=URL, token="tk"))
        [done] = await events(client, sent)
        task_id = done.task.id
        kept = book.get(task_id)
        assert kept is not None and kept.tenant == "acme"
        assert [(c.id, c.url, c.token, c.from_step) for c in kept.configs] == [(task_id, URL, "tk", 0)]
        assert [r["message_id"] for r in book.offered] == [task_id]  # the sender catches up with the row

        made = await client.create_task_push_notification_config(
            TaskPushNotificationConfig(task_id=task_id, id="second", url=URL + "/2"))
        assert (made.id, made.task_id, made.url) == ("second", task_id, URL + "/2")
        got = await client.get_task_push_notification_config(
            GetTaskPushNotificationConfigRequest(task_id=task_id, id="second"))
        assert got.url == URL + "/2"
        first = await client.list_task_push_notification_configs(
            ListTaskPushNotificationConfigsRequest(task_id=task_id, page_size=1))
        rest = await client.list_task_push_notification_configs(
            ListTaskPushNotificationConfigsRequest(task_id=task_id, page_size=1, page_token=first.next_page_token))
        assert [c.id for c in first.configs] + [c.id for c in rest.configs] == [task_id, "second"]
        assert rest.next_page_token == ""
        await client.delete_task_push_notification_config(
            DeleteTaskPushNotificationConfigRequest(task_id=task_id, id="second"))
        with pytest.raises(A2AError, match="no push config 'second'"):
            await client.get_task_push_notification_config(
                GetTaskPushNotificationConfigRequest(task_id=task_id, id="second"))

        rival = await connect(a2a_token("key2", b"secret-2"))
        with pytest.raises(A2AError, match="no task"):  # another tenant's task reads as absent
            await rival.create_task_push_notification_config(
                TaskPushNotificationConfig(task_id=task_id, id="mine", url=URL))
        with pytest.raises(A2AError, match="no task"):
            await rival.list_task_push_notification_configs(ListTaskPushNotificationConfigsRequest(task_id=task_id))

    run(fakes, book, scenario)


def test_bad_urls_and_the_per_task_cap_are_refused_with_the_reason(fakes: Fakes) -> None:
    book = MemoryPushBook()

    async def scenario(connect: Callable[..., Awaitable[Any]]) -> None:
        client = await connect()
        [done] = await events(client, send_request("hi"))
        task_id = done.task.id
        for url, why in (("http://127.0.0.1:8080/hook", "loopback"), ("http://169.254.169.254/", "metadata"),
                         ("http://10.0.0.7/hook", "private"), ("ftp://example.com/x", "not an http")):
            with pytest.raises(A2AError, match=why):
                await client.create_task_push_notification_config(
                    TaskPushNotificationConfig(task_id=task_id, id="x", url=url))
        pushed = send_request("bad-url")
        pushed.configuration.task_push_notification_config.CopyFrom(
            TaskPushNotificationConfig(url="http://[::1]/hook"))
        with pytest.raises(A2AError, match="loopback"):
            await events(client, pushed)
        assert len(fakes.publisher.sent) == 1  # refused before anything was sent
        for n in range(push.MAX_CONFIGS):
            await client.create_task_push_notification_config(
                TaskPushNotificationConfig(task_id=task_id, id=f"c{n}", url=URL))
        with pytest.raises(A2AError, match=f"the most a task may have is {push.MAX_CONFIGS}"):
            await client.create_task_push_notification_config(
                TaskPushNotificationConfig(task_id=task_id, id="one-more", url=URL))
        await client.create_task_push_notification_config(  # replacing one of its ids is not one more
            TaskPushNotificationConfig(task_id=task_id, id="c0", url=URL + "/new"))
        kept = book.get(task_id)
        assert kept is not None and len(kept.configs) == push.MAX_CONFIGS

    run(fakes, book, scenario)
