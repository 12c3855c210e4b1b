"""Calls that wait on the status table are bounded per app (issue 37, L3), against a real `reach gateway`, router,
broker and Redis: with REACH_GATEWAY_WAITS_PER_APP=1, while one blocking A2A SendMessage waits, a second blocking
send, a CancelTask and a `/v1/invoke` repeating an idempotency key are refused 429 `too_many_waits` (nothing sent);
a send that does not wait still passes; once the first ends, waiting calls pass again."""

from __future__ import annotations

import asyncio
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from a2a.client import A2AClientError
from a2a.types.a2a_pb2 import (
    CancelTaskRequest,
    Message,
    Part,
    Role,
    SendMessageConfiguration,
    SendMessageRequest,
    TaskState,
)
from cryptography.fernet import Fernet
from google.protobuf.json_format import MessageToDict, ParseDict
from google.protobuf.struct_pb2 import Struct, Value

from reach.agent import Agent
from tests.integration.agent_support import running, wait_for
from tests.integration.gateway_fixtures import sdk_client, shop_token
from tests.integration.stream_app import StreamApp
from tests.integration.test_gateway_http import Gateway, create_app

pytestmark = pytest.mark.integration
RELEASE = threading.Event()
STARTED: list[str] = []


def gated_agent() -> Agent:
    agent = Agent("agent://demo/waits", region="local", max_concurrency=4)

    @agent.capability("demo.gate", version="1.0.0")
    async def gate(payload: dict[str, Any]) -> dict[str, Any]:
        STARTED.append(str(payload["n"]))
        give_up = time.monotonic() + 60
        while not RELEASE.is_set() and time.monotonic() < give_up:
            await asyncio.sleep(0.05)
        return payload

    @agent.capability("demo.echo", version="1.0.0")
    async def echo(payload: dict[str, Any]) -> dict[str, Any]:
        return payload

    return agent


@pytest.fixture
def gateway(stream_app: StreamApp, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Gateway]:
    monkeypatch.setenv("REACH_GATEWAY_SECRETS_KEY", Fernet.generate_key().decode())
    gw = Gateway(tmp_path, {"shop": create_app("shop")}, env={"REACH_GATEWAY_WAITS_PER_APP": "1"})
    gw.start()
    yield gw
    gw.stop()


def message(capability: str, payload: dict[str, Any], *, wait: bool = True) -> SendMessageRequest:
    meta = Struct()
    meta.update({"skill": capability})
    return SendMessageRequest(message=Message(message_id="", role=Role.ROLE_USER, metadata=meta,
                                              parts=[Part(data=ParseDict(payload, Value()))]),
                              configuration=SendMessageConfiguration(return_immediately=not wait))


async def refused_429(call: Any) -> None:
    with pytest.raises(A2AClientError, match="429"):
        await call


def test_an_app_has_at_most_waits_per_app_calls_waiting_on_the_status_table(gateway: Gateway) -> None:
    RELEASE.clear()
    STARTED.clear()
    key = f"k-{uuid.uuid4().hex[:8]}"
    invoke = {"capability": "demo.echo", "payload": {"n": 0}, "idempotency_key": key, "timeout_ms": 20_000}
    with running(gated_agent()):
        wait_for(lambda: gateway.post("/v1/invoke", invoke).status_code == 200, 60, "demo.echo served",
                 interval=0.5)

        async def scenario() -> None:
            client = await sdk_client(gateway.url, shop_token(gateway))
            first = asyncio.create_task(anext(client.send_message(message("demo.gate", {"n": "1"}))))
            await asyncio.to_thread(wait_for, lambda: STARTED == ["1"] or first.done(), 60, "the first send runs")
            assert not first.done(), first.result()
            sends = len(STARTED)
            await refused_429(anext(client.send_message(message("demo.gate", {"n": "2"}))))
            rpc = {"jsonrpc": "2.0", "id": 1, "method": "SendMessage",
                   "params": MessageToDict(message("demo.gate", {"n": "2"}))}
            headers = {"Authorization": f"Bearer {shop_token(gateway)}", "A2A-Version": "1.0"}
            raw = await asyncio.to_thread(httpx.post, gateway.url + "/a2a/", timeout=30, json=rpc, headers=headers)
            assert raw.status_code == 429 and "too_many_waits" in raw.text, raw.text  # the reason, for a raw client
            # a send that does not wait holds no slot; the refused blocking send sent nothing
            quick = await anext(client.send_message(message("demo.gate", {"n": "3"}, wait=False)))
            assert quick.task.status.state == TaskState.TASK_STATE_SUBMITTED
            await refused_429(client.cancel_task(CancelTaskRequest(id=quick.task.id)))
            # /v1/invoke repeating an idempotency key waits on the status row: refused too, naming the first message
            repeated = await asyncio.to_thread(gateway.post, "/v1/invoke", invoke)
            assert repeated.status_code == 429 and repeated.json()["error"] == "too_many_waits", repeated.text
            assert repeated.headers["Retry-After"] == "1"
            RELEASE.set()
            done = await asyncio.wait_for(first, 60)
            assert done.task.status.state == TaskState.TASK_STATE_COMPLETED
            await asyncio.to_thread(wait_for, lambda: sorted(STARTED) == ["1", "3"], 30, "the quick send ran")
            assert sends == 1 and sorted(STARTED) == ["1", "3"]  # the refused send (n=2) never reached the agent
            again = await anext(client.send_message(message("demo.gate", {"n": "4"})))  # the slot was given back
            assert again.task.status.state == TaskState.TASK_STATE_COMPLETED

        asyncio.run(scenario())
        answered = gateway.post("/v1/invoke", invoke)
        assert answered.status_code == 200 and answered.json()["result"] == {"n": 0}, answered.text
