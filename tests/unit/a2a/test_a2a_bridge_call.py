"""`reach a2a bridge`'s call over a fake SDK client: follow a task until it ends, cancel it with the message,
and map transport failures to retries or rejections."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Any

import pytest
from a2a.client import A2AClientError, A2AClientTimeoutError
from a2a.types.a2a_pb2 import Artifact, Message, Part, StreamResponse, Task, TaskState, TaskStatus
from google.protobuf.json_format import ParseDict
from google.protobuf.struct_pb2 import Value

from reach.a2a.bridge import call
from reach.agent import Canceled, Reject, TransientError
from reach.agent.agent import Context
from reach.core.turns import Turn
from reach.envelopes import new_envelope

S = TaskState


def task(state: TaskState, value: Any = None) -> Task:
    parts = [Part(data=ParseDict(value, Value()))] if value is not None else []
    return Task(id="t1", status=TaskStatus(state=state), artifacts=[Artifact(parts=parts)] if parts else [])


class FakeClient:
    """Answers the send with `first` (or raises it), then GetTask with each of `later` in turn."""

    def __init__(self, first: Task | BaseException, *later: Task) -> None:
        self.first, self.later = first, list(later)
        self.sent: list[Any] = []
        self.cancelled: list[str] = []

    async def send_message(self, request: Any) -> AsyncIterator[StreamResponse]:
        self.sent.append(request)
        if isinstance(self.first, BaseException):
            raise self.first
        yield StreamResponse(task=self.first)

    async def get_task(self, request: Any) -> Task:
        return self.later.pop(0)

    async def cancel_task(self, request: Any) -> Task:
        self.cancelled.append(request.id)
        return task(S.TASK_STATE_CANCELED)


def context(cancelled: bool = False) -> Context:
    env = new_envelope("ext.upper", {"text": "hi"}, session_key="chat-1")
    return Context(envelope=env, agent_id="agent://a2a/ext-upper", instance_id="i1", _cancelled=lambda: cancelled)


def test_a_task_is_followed_until_it_completes() -> None:
    client = FakeClient(task(S.TASK_STATE_WORKING), task(S.TASK_STATE_WORKING), task(S.TASK_STATE_COMPLETED, {"ok": 1}))
    ctx = context()
    assert asyncio.run(call(client, {"text": "hi"}, ctx, 0.0)) == {"ok": 1}  # type: ignore[arg-type]
    [request] = client.sent
    assert request.message.parts[0].text == "hi" and request.message.context_id == "chat-1"
    assert request.message.message_id == f"{ctx.envelope.message_id}-0-1"


def test_a_cancelled_message_cancels_the_remote_task() -> None:
    client = FakeClient(task(S.TASK_STATE_WORKING))
    with pytest.raises(Canceled):
        asyncio.run(call(client, {"n": 1}, context(cancelled=True), 0.0))  # type: ignore[arg-type]
    assert client.cancelled == ["t1"]


@pytest.mark.parametrize(("error", "signal"), [
    (A2AClientTimeoutError("slow"), TransientError), (A2AClientError("HTTP Error 503: busy"), TransientError),
    (A2AClientError("Network communication error: refused"), TransientError),
    (A2AClientError("HTTP Error 401: who"), Reject),
])
def test_transport_failures_retry_and_refusals_reject(error: BaseException, signal: type[Exception]) -> None:
    with pytest.raises(signal):
        asyncio.run(call(FakeClient(error), {"n": 1}, context(), 0.0))  # type: ignore[arg-type]


def test_a_remote_question_asks_the_caller_and_the_answer_goes_to_the_same_remote_task() -> None:
    from reach.a2a.outcome import TASK_KEY
    from reach.agent import NeedsInput
    from reach.core.turns import with_turn

    asking = Task(id="t1", status=TaskStatus(state=S.TASK_STATE_INPUT_REQUIRED,
                                            message=Message(parts=[Part(text="Which city?")])))
    client = FakeClient(task(S.TASK_STATE_WORKING), asking)
    question = asyncio.run(call(client, {"text": "weather"}, context(), 0.0))  # type: ignore[arg-type]
    assert isinstance(question, NeedsInput) and question.question == "Which city?"

    answered = FakeClient(task(S.TASK_STATE_COMPLETED, {"forecast": "rain"}))
    env = new_envelope("ext.upper", {"text": "weather"}, session_key="chat-1")
    schema = json.loads(question.schema_text)
    env = env.model_copy(update={"headers": with_turn(env.headers, Turn(1, "Which city?", schema,
                                                                        {"text": "Oslo"}))})
    ctx = Context(envelope=env, agent_id="agent://a2a/ext-upper", instance_id="i1", _cancelled=lambda: False)
    assert asyncio.run(call(answered, {"text": "weather"}, ctx, 0.0)) == {"forecast": "rain"}  # type: ignore[arg-type]
    [request] = answered.sent
    assert request.message.task_id == "t1" and request.message.parts[0].text == "Oslo"
    assert request.message.message_id == f"{env.message_id}-0-1-t1" and request.message.context_id == "chat-1"
    assert schema == {TASK_KEY: "t1"}
