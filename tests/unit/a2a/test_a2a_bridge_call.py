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
from a2a.utils.errors import TaskNotFoundError
from google.protobuf.json_format import ParseDict
from google.protobuf.struct_pb2 import Value

from reach.a2a import outcome
from reach.a2a.bridge import call
from reach.a2a.outcome import Seal
from reach.agent import BusinessError, Canceled, NeedsInput, Reject, TransientError
from reach.agent.agent import Context
from reach.core.turns import next_turn
from reach.envelopes import new_envelope
from reach.records import Envelope, InputRequest

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



def _asking(task_id: str = "t1") -> Task:
    return Task(id=task_id, context_id="remote-ctx", status=TaskStatus(
        state=S.TASK_STATE_INPUT_REQUIRED, message=Message(parts=[Part(text="Which city?")])))


def _answered(first: Envelope, question: NeedsInput, answer: Any, *, attempt: int = 1) -> Context:
    """The answer's turn as the product builds it (reach.core.turns.next_turn), as delivered on `attempt`."""
    asked = InputRequest(question=question.question, answer_schema=question.schema_text, turn=1,
                         answer=json.dumps(answer))
    env, _ = next_turn(first, asked, agent_id="agent://a2a/ext-upper", now_ms=first.created_at + 1)
    env = env.model_copy(update={"attempt": attempt})
    return Context(envelope=env, agent_id="agent://a2a/ext-upper", instance_id="i1", _cancelled=lambda: False)


def test_a_remote_question_asks_the_caller_and_the_answer_goes_to_the_same_remote_task() -> None:
    first = new_envelope("ext.upper", {"text": "weather"})  # no session key: the bus context is the trace id
    ctx = Context(envelope=first, agent_id="agent://a2a/ext-upper", instance_id="i1", _cancelled=lambda: False)
    seal = Seal(b"k" * 32, first.tenant, first.message_id)
    question = asyncio.run(call(FakeClient(task(S.TASK_STATE_WORKING), _asking()), {"text": "weather"}, ctx,  # type: ignore[arg-type]
                                0.0, seal))
    assert isinstance(question, NeedsInput) and question.question == "Which city?"

    turn = _answered(first, question, {"text": "Oslo"})
    answered = FakeClient(task(S.TASK_STATE_COMPLETED, {"forecast": "rain"}))
    assert asyncio.run(call(answered, {"text": "weather"}, turn, 0.0, seal)) == {"forecast": "rain"}  # type: ignore[arg-type]
    [request] = answered.sent
    assert (request.message.task_id, request.message.context_id) == ("t1", "remote-ctx"), "the remote's context"
    assert request.message.parts[0].text == "Oslo"
    assert request.message.message_id == f"{first.message_id}-{turn.envelope.generation}", "the same on every attempt"


def test_a_retried_answer_turn_follows_the_task_its_first_attempt_answered() -> None:
    first = new_envelope("ext.upper", {"text": "weather"})
    seal = Seal(b"k" * 32, first.tenant, first.message_id)
    question = outcome.result_of(_asking(), seal)
    assert isinstance(question, NeedsInput)
    # attempt 1's answer reached the remote, its response was lost: attempt 2 reads the task and does not resend
    moved_on = FakeClient(task(S.TASK_STATE_WORKING), task(S.TASK_STATE_WORKING),
                          task(S.TASK_STATE_COMPLETED, {"ok": 1}))
    assert asyncio.run(call(moved_on, {}, _answered(first, question, "Oslo", attempt=2), 0.0, seal)) == {"ok": 1}  # type: ignore[arg-type]
    assert moved_on.sent == []
    # it asks another question now (attempt 1's answer got there): that question is the caller's, nothing is resent
    again = _asking()
    again.status.message.parts[0].text = "Which country?"
    asks_again = FakeClient(task(S.TASK_STATE_WORKING), again)
    second = asyncio.run(call(asks_again, {}, _answered(first, question, "Oslo", attempt=2), 0.0, seal))  # type: ignore[arg-type]
    assert isinstance(second, NeedsInput) and second.question == "Which country?" and asks_again.sent == []
    # still waiting on the same question (attempt 1 never got there): attempt 2 sends the answer
    waiting = FakeClient(task(S.TASK_STATE_COMPLETED, {"ok": 2}), _asking())
    assert asyncio.run(call(waiting, {}, _answered(first, question, "Oslo", attempt=2), 0.0, seal)) == {"ok": 2}  # type: ignore[arg-type]
    assert len(waiting.sent) == 1


def test_an_answer_to_a_task_the_remote_no_longer_has_fails_and_a_foreign_turn_is_refused() -> None:
    first = new_envelope("ext.upper", {"text": "weather"})
    seal = Seal(b"k" * 32, first.tenant, first.message_id)
    question = outcome.result_of(_asking(), seal)
    assert isinstance(question, NeedsInput)
    with pytest.raises(BusinessError) as gone:
        asyncio.run(call(FakeClient(TaskNotFoundError("no such task")), {}, _answered(first, question, "x"), 0.0,  # type: ignore[arg-type]
                         seal))
    assert gone.value.code == "A2A_TASK_GONE"
    other = Seal(b"k" * 32, first.tenant, "another-message")  # the conversation of one message replayed on another
    client = FakeClient(task(S.TASK_STATE_COMPLETED, {"ok": 1}))
    with pytest.raises(Reject):
        asyncio.run(call(client, {}, _answered(first, question, "x"), 0.0, other))  # type: ignore[arg-type]
    assert client.sent == [], "nothing sent to the remote"
