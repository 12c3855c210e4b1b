"""A remote A2A agent's answer as an Agent-Reach outcome (pure): payload -> message parts, task -> result
or the signal that ends the step (reach.agent.signals), for `reach a2a bridge`.

A remote task that stops in input-required or auth-required becomes the bridge's own question (NeedsInput,
NeedsAuth): the message waits in INPUT_REQUIRED for the caller's answer, and the answer's turn sends it to that same
remote task. The remote task's id and context travel in the question's schema (`x-reach-a2a-task`, annotations JSON
Schema ignores), sealed with an HMAC over the tenant, the message and both ids (`Seal`): a conversation header
forged on a published envelope cannot point the bridge, and its bearer, at another task."""

from __future__ import annotations

import hashlib
import hmac
from dataclasses import dataclass
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
INTERRUPTED = frozenset({S.TASK_STATE_INPUT_REQUIRED, S.TASK_STATE_AUTH_REQUIRED})

TASK_KEY = "x-reach-a2a-task"
"""Where the bridge's question keeps the remote task that asked it: `{"id", "context", "seal"}`."""
MAX_TASK_ID_CHARS = 256
"""A remote task id longer than this (or empty, or not printable) is refused: it is echoed in every next turn."""


@dataclass(frozen=True)
class Seal:
    """The bridge's key for the remote tasks its questions name, and the message they belong to."""

    key: bytes
    tenant: str
    message_id: str

    def _mac(self, task_id: str, context_id: str) -> str:
        text = "\n".join((self.tenant, self.message_id, task_id, context_id))
        return hmac.new(self.key, text.encode(), hashlib.sha256).hexdigest()

    def reference(self, task: Task) -> dict[str, str]:
        """The sealed reference to `task` a question carries; BusinessError for an id the bridge will not echo."""
        for what, value in (("id", task.id), ("context id", task.context_id)):
            if len(value) > MAX_TASK_ID_CHARS or not value.isprintable() or (what == "id" and not value):
                raise BusinessError("A2A_BAD_TASK", f"the remote agent asked in a task whose {what} is empty, longer "
                                    f"than {MAX_TASK_ID_CHARS} characters or not printable; it cannot be answered")
        return {"id": task.id, "context": task.context_id, "seal": self._mac(task.id, task.context_id)}

    def opened(self, turns: tuple[Turn, ...]) -> tuple[str, str] | None:
        """The remote task (id, context id) the last question came from, or None on a first turn or when the last
        question was not the bridge's; Reject when its reference was not sealed by this key for this message."""
        if not turns or not isinstance(turns[-1].schema, dict) or TASK_KEY not in turns[-1].schema:
            return None
        ref = turns[-1].schema[TASK_KEY]
        task_id, context_id, seal = (ref.get(k) if isinstance(ref, dict) else None for k in ("id", "context", "seal"))
        if not (isinstance(task_id, str) and isinstance(context_id, str) and isinstance(seal, str)
                and hmac.compare_digest(seal, self._mac(task_id, context_id))):
            raise Reject("the conversation names a remote task this bridge did not ask in for this message (a "
                         "forged or foreign reach-turns header, or bridges with different REACH_A2A_TURN_KEY)",
                         code="A2A_FOREIGN_TURN")
        return task_id, context_id


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


def _status_text(task: Task) -> str:
    """The text parts of a task's status message, joined."""
    return "".join(p.text for p in task.status.message.parts if p.HasField("text"))


def _why(task: Task) -> str:
    text = _status_text(task)
    return text or f"the remote agent ended task {task.id} {TaskState.Name(task.status.state)}"


def question_of(task: Task) -> str:
    """The question an interrupted task asks: its status text, or which task asks when it has none."""
    text = _status_text(task).strip()
    return (text or f"the remote agent's task {task.id[:MAX_TASK_ID_CHARS]} asks for more input")[:MAX_QUESTION_CHARS]


def result_of(answer: Task | Message, seal: Seal | None = None) -> Any:
    """The step's result for a final answer, the question for an interrupted one (its task sealed by `seal`; without
    one the bridge cannot answer, BusinessError); raises the signal for any other end."""
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
    if state in INTERRUPTED:
        if seal is None:
            raise BusinessError("A2A_" + TaskState.Name(state).removeprefix("TASK_STATE_"),
                                f"the remote agent asks for more ({_why(answer)})")
        schema = {TASK_KEY: seal.reference(answer)}
        ask = NeedsAuth if state == S.TASK_STATE_AUTH_REQUIRED else NeedsInput
        return ask(question_of(answer), schema)
    raise BusinessError("A2A_NOT_FINAL", f"task {answer.id} is still {TaskState.Name(state)}")
