"""A2A messages and tasks <-> the bus (pure): message parts -> payload, a status row -> a Task.

A Task is a status row read through reach.a2a.states: id = message_id, context_id = trace_id (the
send sets the envelope's trace_id and session_key from the A2A context id), the receipt timeline as
history (one agent message per step), the COMPLETED result as the one artifact."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from a2a.types.a2a_pb2 import (
    Artifact,
    Message,
    Part,
    Role,
    Task,
    TaskArtifactUpdateEvent,
    TaskState,
    TaskStatus,
    TaskStatusUpdateEvent,
)
from google.protobuf.json_format import MessageToDict, ParseDict
from google.protobuf.struct_pb2 import Struct, Value

from reach.a2a import hints
from reach.a2a.states import FINAL, INTERRUPTED, task_state
from reach.core.progress import Chunks, Cursor, news
from reach.core.turns import AUTH, kind_of
from reach.errors import ReachError

MAX_CONTEXT_ID = 200  # it becomes the envelope's trace_id and session_key (Routing.session_key: 256)
RESULT = "result"
STREAM = "stream"  # the artifact a handler's partial results (ctx.emit) build up, one per generation and attempt


class BadMessage(ReachError):
    """An A2A message the bus cannot carry (no usable part, an unsupported part, an oversized id)."""


def payload_of(message: Message) -> Any:
    """The envelope payload: the one data part's value, else the text parts joined as {"text": ...}."""
    data = [p for p in message.parts if p.HasField("data")]
    texts = [p.text for p in message.parts if p.HasField("text")]
    other = len(message.parts) - len(data) - len(texts)
    if other:
        raise BadMessage(f"the message has {other} file/url/raw part(s); the bus carries JSON: send a data part "
                         "or text parts (a file as a URL inside a data part)")
    if len(data) == 1 and not texts:
        return MessageToDict(data[0].data)
    if data:
        raise BadMessage(f"the message has {len(data)} data part(s) and {len(texts)} text part(s); send one data "
                         "part (the payload) or only text parts")
    if not texts:
        raise BadMessage("the message has no parts: send one data part (the payload) or text parts")
    return {"text": "".join(texts)}


def answer_of(message: Message) -> Any:
    """An answer's value: the one data part's value, else the text parts joined as one string (words: the question's
    schema decides how they are read, reach.core.words)."""
    payload = payload_of(message)
    texts = [p.text for p in message.parts if p.HasField("text")]
    return "".join(texts) if texts else payload


def context_id_of(message: Message) -> str | None:
    """The message's context id, checked: it becomes a trace id and a session key."""
    context = message.context_id
    if not context:
        return None
    if len(context) > MAX_CONTEXT_ID or not context.isprintable():
        raise BadMessage(f"context_id is {len(context)} characters or not printable; expected at most "
                         f"{MAX_CONTEXT_ID} printable characters")
    return context


def _struct(values: Mapping[str, Any]) -> Struct:
    out = Struct()
    out.update({k: v for k, v in values.items() if v is not None})
    return out


def _result_part(result: str) -> Part:
    try:
        value = json.loads(result)
    except ValueError:
        return Part(text=result)
    return Part(data=ParseDict(value, Value()))


def step_message(task_id: str, context_id: str, index: int, step: Mapping[str, Any]) -> Message:
    """One timeline step as an agent message: `STARTED (attempt 2, agent://x)` plus the step as metadata."""
    who = f", {step['agent_id']}" if step.get("agent_id") else ""
    text = f"{step.get('status')} (attempt {step.get('attempt')}{who})"
    error = step.get("error") or {}
    if error:
        text += f": {error.get('code')}: {error.get('message')}"
    return Message(message_id=f"{task_id}:{index}", context_id=context_id, task_id=task_id, role=Role.ROLE_AGENT,
                   parts=[Part(text=text)], metadata=_struct({k: step.get(k) for k in
                                                              ("status", "attempt", "generation", "at", "agent_id")}))


def row_state(row: Mapping[str, Any]) -> TaskState:
    """The row's A2A state: its status's (reach.a2a.states), but a question asking for authorization (NeedsAuth, the
    `x-reach-kind` of its schema) is auth-required rather than input-required."""
    state = task_state(str(row.get("status", "")))
    if state == TaskState.TASK_STATE_INPUT_REQUIRED and kind_of((row.get("input") or {}).get("answer_schema")) == AUTH:
        return TaskState.TASK_STATE_AUTH_REQUIRED
    return state


def status_of(row: Mapping[str, Any]) -> TaskStatus:
    """The row's A2A status; a failure or refusal carries its error as the status message, a question (input- or
    auth-required) the question as text and its answer's schema as data."""
    state = row_state(row)
    status = TaskStatus(state=state)
    error = row.get("last_error") or {}
    if state in FINAL and state != TaskState.TASK_STATE_COMPLETED and error:
        status.message.CopyFrom(Message(
            message_id=f"{row['message_id']}:status", role=Role.ROLE_AGENT, task_id=str(row["message_id"]),
            context_id=str(row.get("trace_id", "")),
            parts=[Part(text=f"{row.get('status')}: {error.get('code')}: {error.get('message')}")]))
    asked = row.get("input") or {}
    if state in INTERRUPTED and asked.get("question"):
        status.message.CopyFrom(Message(
            message_id=f"{row['message_id']}:input:{row.get('generation', 0)}", role=Role.ROLE_AGENT,
            task_id=str(row["message_id"]), context_id=str(row.get("trace_id", "")),
            parts=[Part(text=str(asked["question"])),
                   Part(data=ParseDict({"answer_schema": json.loads(asked.get("answer_schema") or "{}")}, Value()))]))
    if row.get("updated_at"):
        status.timestamp.FromMilliseconds(int(row["updated_at"]))
    return status


def result_artifact(row: Mapping[str, Any]) -> Artifact | None:
    if row.get("status") != "COMPLETED" or row.get("result") is None:
        return None
    return Artifact(artifact_id=f"{row['message_id']}:{RESULT}", name=RESULT, parts=[_result_part(str(row["result"]))])


def task_of(row: Mapping[str, Any], history_length: int | None = None) -> Task:
    """The status row as a Task; `history_length` keeps only the newest steps (None: all, 0: none)."""
    task_id, context_id = str(row["message_id"]), str(row.get("trace_id", ""))
    timeline = list(row.get("timeline") or [])
    first = 0 if history_length is None else max(0, len(timeline) - history_length)
    task = Task(id=task_id, context_id=context_id, status=status_of(row),
                history=[step_message(task_id, context_id, i, s) for i, s in enumerate(timeline) if i >= first],
                metadata=_struct({"capability": row.get("capability"), "attempt": row.get("attempt"),
                                  "generation": row.get("generation"),
                                  "reach_status": row.get("status"),
                                  hints.BUDGET_EXTENSION: hints.usage_report(row)}))
    artifact = result_artifact(row)
    if artifact is not None:
        task.artifacts.append(artifact)
    return task


def refused_task(task_id: str, context_id: str, state: TaskState, reason: str) -> Task:
    """A Task for a message the door refused before the bus (nothing to look up later)."""
    status = TaskStatus(state=state, message=Message(message_id=f"{task_id}:status", role=Role.ROLE_AGENT,
                                                     task_id=task_id, context_id=context_id,
                                                     parts=[Part(text=reason)]))
    return Task(id=task_id, context_id=context_id, status=status)


def first_step_of(row: Mapping[str, Any], generation: int) -> int:
    """The index of the row's first timeline step of `generation` (or later); the timeline's length when none."""
    timeline = list(row.get("timeline") or [])
    return next((i for i, step in enumerate(timeline) if int(step.get("generation") or 0) >= generation),
                len(timeline))


def updates(row: Mapping[str, Any], sent: int, last: TaskState | None
            ) -> tuple[list[TaskStatusUpdateEvent | TaskArtifactUpdateEvent], int, TaskState | None]:
    """Stream events for the timeline entries after the first `sent`: one status update per change of A2A
    state (a retry's ATTEMPT_FAILED -> RETRY_SCHEDULED -> STARTED reads working -> submitted -> working),
    the result artifact before the final update. Returns the events, the new count, the last state sent."""
    indexed, sent, last = indexed_updates(row, sent, last)
    return [event for _, event in indexed], sent, last


def indexed_updates(row: Mapping[str, Any], sent: int, last: TaskState | None
                    ) -> tuple[list[tuple[int, TaskStatusUpdateEvent | TaskArtifactUpdateEvent]], int,
                               TaskState | None]:
    """`updates`, each event with the index of the timeline entry it stands for."""
    task_id, context_id = str(row["message_id"]), str(row.get("trace_id", ""))
    timeline = list(row.get("timeline") or [])
    now = row_state(row)
    final = now in FINAL
    events: list[tuple[int, TaskStatusUpdateEvent | TaskArtifactUpdateEvent]] = []
    for index in range(sent, len(timeline)):
        step = timeline[index]
        if now in INTERRUPTED and index == len(timeline) - 1 and step.get("status") == "INPUT_REQUIRED":
            step_state = now  # the question the task waits on: the row's status message carries it
            events.append((index, TaskStatusUpdateEvent(task_id=task_id, context_id=context_id, status=status_of(row),
                                                        metadata=_struct({"reach_status": step.get("status"),
                                                                          "attempt": step.get("attempt"),
                                                                          "generation": step.get("generation")}))))
            last = step_state
            continue
        done = final and index == len(timeline) - 1
        state = task_state(str(row.get("status"))) if done else task_state(str(step.get("status", "")))
        if state == TaskState.TASK_STATE_INPUT_REQUIRED and not done and _asked_auth(row, step):
            state = TaskState.TASK_STATE_AUTH_REQUIRED
        if state == TaskState.TASK_STATE_UNSPECIFIED or (state == last and not done) or state in FINAL and not done:
            continue
        if done:
            artifact = result_artifact(row)
            if artifact is not None:
                events.append((index, TaskArtifactUpdateEvent(task_id=task_id, context_id=context_id,
                                                              artifact=artifact, last_chunk=True)))
            status = status_of(row)
        else:
            status = TaskStatus(state=state, message=step_message(task_id, context_id, index, step))
        events.append((index, TaskStatusUpdateEvent(task_id=task_id, context_id=context_id, status=status,
                                                    metadata=_struct({"reach_status": step.get("status"),
                                                                      "attempt": step.get("attempt")}))))
        last = state
    return events, max(sent, len(timeline)), last


def _asked_auth(row: Mapping[str, Any], step: Mapping[str, Any]) -> bool:
    """Whether an answered question (an INPUT_REQUIRED step of generation g, answered by the turn that started g + 1)
    asked for authorization; a turn older than the row keeps (its last 16) counts as input."""
    started = int(step.get("generation") or 0) + 1
    return any(t.get("generation") == started and t.get("auth") for t in row.get("turns") or [])


def chunk_events(row: Mapping[str, Any], cursor: Cursor, *, opened: bool
                 ) -> tuple[list[TaskArtifactUpdateEvent], Cursor, bool]:
    """The handler's partial results past `cursor` as artifact update events of the `stream` artifact, in order:
    the first this reader gets (or a replacing chunk, or a retried attempt's first) opens the artifact, the others
    append to it. Returns the events, the cursor after them and whether the artifact is open for this reader."""
    generation = int(row.get("generation") or 0)
    if generation != cursor.generation:  # the next turn: its chunks are numbered afresh
        cursor, opened = Cursor(generation=generation), False
    raw = row.get("progress")
    if raw is None:
        return [], cursor, opened
    attempt = cursor.attempt
    chunks, _, cursor = news(Chunks.model_validate(raw), cursor)
    if cursor.attempt != attempt:
        opened = False
    task_id, context_id = str(row["message_id"]), str(row.get("trace_id", ""))
    events = []
    for chunk in chunks:
        part = Part(data=ParseDict(json.loads(chunk.data), Value())) if chunk.kind == "json" else Part(text=chunk.data)
        artifact = Artifact(artifact_id=f"{task_id}:{STREAM}:{generation}", name=STREAM, parts=[part],
                            metadata=_struct({"seq": chunk.seq, "attempt": cursor.attempt}))
        events.append(TaskArtifactUpdateEvent(task_id=task_id, context_id=context_id, artifact=artifact,
                                              append=opened and chunk.append, last_chunk=False))
        opened = True
    return events, cursor, opened
