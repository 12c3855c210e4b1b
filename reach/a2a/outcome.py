"""A remote A2A agent's answer as an Agent-Reach outcome (pure): payload -> message parts, task -> result
or the signal that ends the step (reach.agent.signals), for `reach a2a bridge`."""

from __future__ import annotations

from typing import Any

from a2a.types.a2a_pb2 import Message, Part, Task, TaskState
from google.protobuf.json_format import MessageToDict, ParseDict
from google.protobuf.struct_pb2 import Value

from reach.agent.signals import BusinessError, Canceled, Reject

S = TaskState
DONE = frozenset({S.TASK_STATE_COMPLETED, S.TASK_STATE_FAILED, S.TASK_STATE_REJECTED, S.TASK_STATE_CANCELED,
                  S.TASK_STATE_INPUT_REQUIRED, S.TASK_STATE_AUTH_REQUIRED})
"""States after which waiting longer changes nothing: final, or interrupted (the bridge cannot answer)."""


def parts_of(payload: Any) -> list[Part]:
    """`{"text": "..."}` or a string is a text part (what text agents read); anything else one data part."""
    if isinstance(payload, str):
        return [Part(text=payload)]
    if isinstance(payload, dict) and set(payload) == {"text"} and isinstance(payload["text"], str):
        return [Part(text=payload["text"])]
    return [Part(data=ParseDict(payload, Value()))]


def value_of(parts: list[Part]) -> Any:
    """The result: the first data part's value, else the text parts joined as {"text": ...}, else None."""
    for part in parts:
        if part.HasField("data"):
            return MessageToDict(part.data)
    texts = [p.text for p in parts if p.HasField("text")]
    return {"text": "".join(texts)} if texts else None


def _why(task: Task) -> str:
    text = "".join(p.text for p in task.status.message.parts if p.HasField("text"))
    return text or f"the remote agent ended task {task.id} {TaskState.Name(task.status.state)}"


def result_of(answer: Task | Message) -> Any:
    """The step's result for a final answer; raises the signal for any other end."""
    if isinstance(answer, Message):
        return value_of(list(answer.parts))
    state = answer.status.state
    if state == S.TASK_STATE_COMPLETED:
        parts = [p for artifact in answer.artifacts for p in artifact.parts] or list(answer.status.message.parts)
        return value_of(parts)
    if state == S.TASK_STATE_REJECTED:
        raise Reject(_why(answer), code="A2A_REJECTED")
    if state == S.TASK_STATE_CANCELED:
        raise Canceled(_why(answer))
    if state == S.TASK_STATE_FAILED:
        raise BusinessError("A2A_FAILED", _why(answer))
    if state in (S.TASK_STATE_INPUT_REQUIRED, S.TASK_STATE_AUTH_REQUIRED):
        raise BusinessError("A2A_" + TaskState.Name(state).removeprefix("TASK_STATE_"),
                            f"the remote agent asks for more ({_why(answer)}); the bridge cannot answer")
    raise BusinessError("A2A_NOT_FINAL", f"task {answer.id} is still {TaskState.Name(state)}")
