"""`reach a2a bridge`'s mapping of a remote A2A answer to the step's outcome, and of a payload to parts."""

from __future__ import annotations

import json

import pytest
from a2a.types.a2a_pb2 import Artifact, Message, Part, Task, TaskState, TaskStatus
from google.protobuf.json_format import ParseDict
from google.protobuf.struct_pb2 import Value

from reach.a2a.outcome import TASK_KEY, Seal, parts_of, result_of
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



SEAL = Seal(b"k" * 32, "acme", "m1")


def _asking(state: TaskState, why: str = "", task_id: str = "t1") -> Task:
    task = _task(state, why=why)
    task.id, task.context_id = task_id, "c1"
    return task


def test_a_remote_question_becomes_the_bridges_question_naming_the_sealed_task_that_asked() -> None:
    question = result_of(_asking(S.TASK_STATE_INPUT_REQUIRED, "Which city?"), SEAL)
    assert type(question) is NeedsInput and question.question == "Which city?"
    ref = json.loads(question.schema_text)[TASK_KEY]
    assert (ref["id"], ref["context"]) == ("t1", "c1") and len(ref["seal"]) == 64
    auth = result_of(_asking(S.TASK_STATE_AUTH_REQUIRED), SEAL)
    assert isinstance(auth, NeedsAuth) and "t1" in auth.question, "no text: the question says which task asks"
    long = result_of(_asking(S.TASK_STATE_INPUT_REQUIRED, "x" * 5_000), SEAL)
    assert isinstance(long, NeedsInput) and len(long.question) == 2_048
    with pytest.raises(BusinessError, match="A2A_INPUT_REQUIRED"):
        result_of(_asking(S.TASK_STATE_INPUT_REQUIRED, "?"))  # no seal: nobody could answer it


@pytest.mark.parametrize("task_id", ["", "x" * 257, "t\n1"])
def test_a_task_id_the_bridge_will_not_echo_fails_the_step(task_id: str) -> None:
    with pytest.raises(BusinessError) as raised:
        result_of(_asking(S.TASK_STATE_INPUT_REQUIRED, "?", task_id), SEAL)
    assert raised.value.code == "A2A_BAD_TASK"


def _turn(schema: object) -> tuple[Turn, ...]:
    return (Turn(1, "Which city?", schema, {"text": "Oslo"}),)


def test_the_task_a_next_turn_answers_is_opened_only_with_its_seal() -> None:
    question = result_of(_asking(S.TASK_STATE_INPUT_REQUIRED, "?"), SEAL)
    schema = json.loads(question.schema_text)
    assert SEAL.opened(()) is None and SEAL.opened(_turn({"type": "object"})) is None
    assert SEAL.opened(_turn(schema)) == ("t1", "c1")
    forged = {TASK_KEY: {**schema[TASK_KEY], "id": "someone-elses"}}
    for seal, turns in ((SEAL, _turn(forged)), (Seal(b"k" * 32, "other-tenant", "m1"), _turn(schema)),
                        (Seal(b"k" * 32, "acme", "m2"), _turn(schema)), (SEAL, _turn({TASK_KEY: "t1"}))):
        with pytest.raises(Reject) as raised:
            seal.opened(turns)
        assert raised.value.code == "A2A_FOREIGN_TURN"
