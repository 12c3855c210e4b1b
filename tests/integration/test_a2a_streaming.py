"""A2A streaming of partial results end to end (issue 26, Done means): the official a2a-sdk client streams
`demo.write` through the gateway on the real broker, Redis and stream app and gets the writer's 5 chunks in order
as artifact update events of the `stream` artifact, then the completed task; a second client that resubscribes
mid-stream gets the rest, in order, and the ending."""

from __future__ import annotations

import asyncio

import pytest
from a2a.types.a2a_pb2 import Message, Part, Role, SendMessageRequest, StreamResponse, SubscribeToTaskRequest, TaskState
from google.protobuf.json_format import MessageToDict, ParseDict
from google.protobuf.struct_pb2 import Struct, Value

from examples.writer_agent import agent as writer_agent
from examples.writer_agent import parts
from reach.a2a import tasks
from tests.integration.agent_support import running, wait_for
from tests.integration.gateway_fixtures import gateway, sdk_client, shop_token
from tests.integration.test_gateway_http import Gateway

pytestmark = pytest.mark.integration
__all__ = ["gateway"]


def write(topic: str) -> SendMessageRequest:
    meta = Struct()
    meta.update({"skill": "demo.write"})
    return SendMessageRequest(message=Message(message_id="", role=Role.ROLE_USER, metadata=meta,
                                              parts=[Part(data=ParseDict({"topic": topic}, Value()))]))


def chunks(events: list[StreamResponse]) -> list[tuple[str, bool]]:
    return [(e.artifact_update.artifact.parts[0].text, e.artifact_update.append) for e in events
            if e.HasField("artifact_update") and e.artifact_update.artifact.name == tasks.STREAM]


def final_state(events: list[StreamResponse]) -> int:
    last = events[-1]
    return last.status_update.status.state if last.HasField("status_update") else last.task.status.state


async def streams(url: str, token: str) -> None:
    first, second = await sdk_client(url, token, streaming=True), await sdk_client(url, token, streaming=True)
    expected = parts("Kafka")
    events = [e async for e in first.send_message(write("Kafka"))]
    assert [text for text, _ in chunks(events)] == expected
    assert [append for _, append in chunks(events)] == [False, True, True, True, True]  # opened, then appended
    assert final_state(events) == TaskState.TASK_STATE_COMPLETED
    [result] = [e.artifact_update.artifact for e in events
                if e.HasField("artifact_update") and e.artifact_update.artifact.name == tasks.RESULT]
    assert MessageToDict(result.parts[0].data) == {"text": "".join(expected)}
    last_chunk = max(i for i, e in enumerate(events) if e.HasField("artifact_update")
                     and e.artifact_update.artifact.name == tasks.STREAM)
    assert last_chunk < len(events) - 1  # every chunk before the ending

    # a second client resubscribes while the first is mid-stream: it gets the rest, in order, and the ending
    seen: list[StreamResponse] = []
    resumed: list[StreamResponse] = []

    async def follow() -> None:
        async for event in first.send_message(write("Reach")):
            seen.append(event)
            if len(chunks(seen)) == 2 and not resumed:
                task_id = seen[0].task.id
                resumed.extend([e async for e in second.subscribe(SubscribeToTaskRequest(id=task_id))])

    await asyncio.wait_for(follow(), 60)
    rest = [text for text, _ in chunks(resumed)]
    wanted = parts("Reach")
    assert rest and rest == wanted[len(wanted) - len(rest):], rest  # the tail, in order (what the row still holds)
    assert set(wanted[2:]) <= set(rest)
    assert final_state(resumed) == TaskState.TASK_STATE_COMPLETED


def test_the_sdk_client_streams_the_writers_chunks_and_a_second_client_resubscribes(gateway: Gateway) -> None:
    token = shop_token(gateway)
    with running(writer_agent):
        def served() -> bool:
            resp = gateway.post("/v1/invoke", {"capability": "demo.write", "payload": {"topic": "warm"},
                                               "timeout_ms": 5_000})
            return resp.status_code == 200
        wait_for(served, 60, "demo.write served", interval=0.5)
        asyncio.run(streams(gateway.url, token))
