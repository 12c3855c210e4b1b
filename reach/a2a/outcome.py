"""A remote A2A agent's answer as an Agent-Reach outcome (pure): payload -> message parts, task -> result
or the signal that ends the step (reach.agent.signals), for `reach a2a bridge`.

A remote task that stops in input-required or auth-required becomes the bridge's own question (NeedsInput,
NeedsAuth): the message waits in INPUT_REQUIRED for the caller's answer, and the answer's turn sends it to that same
remote task. The remote task's id travels in the question's schema (`x-reach-a2a-task`, an annotation JSON Schema
ignores), so any bridge instance can take the next turn."""

from __future__ import annotations

from typing import Any

from a2a.types.a2a_pb2 import Message, Part, Task, TaskState
from google.protobuf.json_format import MessageToDict, ParseDict
from google.protobuf.struct_pb2 import Value

from reach.agent.signals import BusinessError, Canceled, NeedsAuth, NeedsInput, Reject
from reach.core.turns import MAX_QUESTION_CHARS, Turn

S = TaskState
DONE = frozenset({S.TASK_STATE_COMPLETED, S.TASK_STATE_FAILED, S.TASK_STATE_REJECTED, S.TASK_STATE_CANCELED,
                  S.TASK_STATE_INPUT_REQUIRED, S.TASK_STATE_AUTH_REQUIRED})
"""States after which waiting longer changes nothing: final, or interrupted (the caller answers, on a next turn)."""

TASK_KEY = "x-reach-a2a-task"
"""Where the bridge's question keeps the id of the remote task that asked it."""


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


def asked(turns: tuple[Turn, ...]) -> str | None:
    """The remote task the last question came from (the caller's answer goes to it), or None on a first turn."""
    if not turns or not isinstance(turns[-1].schema, dict):
        return None
    task_id = turns[-1].schema.get(TASK_KEY)
    return task_id if isinstance(task_id, str) and task_id else None


def result_of(answer: Task | Message) -> Any:
    """The step's result for a final answer, the question for an interrupted one; raises the signal for any other
    end."""
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
        text = "".join(p.text for p in answer.status.message.parts if p.HasField("text")).strip()
        question = (text or f"the remote agent's task {answer.id} asks for more input")[:MAX_QUESTION_CHARS]
        schema = {TASK_KEY: answer.id}
        return NeedsAuth(question, schema) if state == S.TASK_STATE_AUTH_REQUIRED else NeedsInput(question, schema)
    raise BusinessError("A2A_NOT_FINAL", f"task {answer.id} is still {TaskState.Name(state)}")
