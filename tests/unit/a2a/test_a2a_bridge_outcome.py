"""`reach a2a bridge`'s mapping of a remote A2A answer to the step's outcome, and of a payload to parts."""

from __future__ import annotations

import json

import pytest
from a2a.types.a2a_pb2 import Artifact, Message, Part, Task, TaskState, TaskStatus
from google.protobuf.json_format import ParseDict
from google.protobuf.struct_pb2 import Value

from reach.a2a.outcome import TASK_KEY, asked, parts_of, result_of
from reach.agent import BusinessError, Canceled, NeedsAuth, NeedsInput, Reject
from reach.agent.outcomes import Outcome, from_exception
from reach.core.turns import Turn

S = TaskState


def _task(state: TaskState, *parts: Part, why: str = "") -> Task:
    status = TaskStatus(state=state, message=Message(parts=[Part(text=why)] if why else []))
    return Task(id="t1", status=status, artifacts=[Artifact(parts=list(parts))] if parts else [])


def test_payloads_become_text_or_data_parts() -> None:
    assert parts_of({"text": "hi"})[0].text == "hi" and parts_of("hi")[0].text == "hi"
    assert parts_of({"text": "hi", "n": 1})[0].HasField("data")


def test_a_completed_task_or_a_message_is_the_result() -> None:
    data = Part(data=ParseDict({"upper": "HI"}, Value()))
    assert result_of(_task(S.TASK_STATE_COMPLETED, data)) == {"upper": "HI"}
    assert result_of(_task(S.TASK_STATE_COMPLETED, Part(text="a"), Part(text="b"))) == {"text": "ab"}
    assert result_of(Message(parts=[Part(text="direct")])) == {"text": "direct"}


@pytest.mark.parametrize(("state", "signal", "outcome"), [
    (S.TASK_STATE_FAILED, BusinessError, Outcome.FAIL), (S.TASK_STATE_REJECTED, Reject, Outcome.REJECT),
    (S.TASK_STATE_CANCELED, Canceled, Outcome.CANCEL),
])
def test_other_ends_raise_the_signal_of_their_outcome(state: TaskState, signal: type[Exception],
                                                      outcome: Outcome) -> None:
    with pytest.raises(signal) as raised:
        result_of(_task(state, why="because"))
    assert from_exception(raised.value).outcome is outcome
    assert "because" in str(raised.value) or state == S.TASK_STATE_CANCELED


def test_a_remote_question_becomes_the_bridges_question_naming_the_task_that_asked() -> None:
    question = result_of(_task(S.TASK_STATE_INPUT_REQUIRED, why="Which city?"))
    assert type(question) is NeedsInput and question.question == "Which city?"
    assert json.loads(question.schema_text) == {TASK_KEY: "t1"}
    auth = result_of(_task(S.TASK_STATE_AUTH_REQUIRED))
    assert isinstance(auth, NeedsAuth) and "t1" in auth.question, "no text: the question says which task asks"
    long = result_of(_task(S.TASK_STATE_INPUT_REQUIRED, why="x" * 5_000))
    assert isinstance(long, NeedsInput) and len(long.question) == 2_048


def test_the_task_a_next_turn_answers_is_read_from_the_last_question() -> None:
    assert asked(()) is None
    assert asked((Turn(1, "Which city?", {TASK_KEY: "t1"}, {"text": "Oslo"}),)) == "t1"
    assert asked((Turn(1, "q", {TASK_KEY: "t1"}, 1), Turn(2, "q", {"type": "object"}, 2))) is None
    assert asked((Turn(1, "q", None, 1),)) is None and asked((Turn(1, "q", {TASK_KEY: 7}, 1),)) is None
