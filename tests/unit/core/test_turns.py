"""Multi-turn (pure): questions and their schemas, answers checked, the conversation's bounds, the next turn, and
how the status row and the timekeeper see INPUT_REQUIRED."""

from __future__ import annotations

import json

import pytest

from reach.core.deadlines import Due, due_tasks
from reach.core.lifecycle import StatusRow, fold
from reach.core.turns import (
    DROPPED_HEADER,
    MAX_CONVERSATION_BYTES,
    MAX_TURNS,
    PREFER_HEADER,
    AnswerRefused,
    BadQuestion,
    Turn,
    answer_problem,
    checked_answer,
    conversation,
    next_turn,
    question_of,
    refusal,
    with_turn,
)
from reach.envelopes import new_envelope
from reach.records import Decision, InputRequest, Receipt, Status

NAME = {"type": "object", "required": ["name"], "properties": {"name": {"type": "string", "minLength": 1}}}


def receipt(status: Status, at: int, *, generation: int = 0, asked: InputRequest | None = None) -> Receipt:
    return Receipt(message_id="m", trace_id="t", tenant="acme", capability="demo.interview", status=status, at=at,
                   generation=generation, deadline=60_000, delivery_timeout_ms=1_000, instance_id="i1",
                   agent_id="agent://demo/interview", input=asked,
                   decision=Decision(topic="ns.agent.demo.interview", partition=0, offset=5)
                   if status is Status.ROUTED else None)


def waiting() -> StatusRow:
    row = None
    question = InputRequest(question="What is your name?", answer_schema=json.dumps(NAME), turn=1,
                            origin_topic="ns.agent.demo.interview", origin_partition=0, origin_offset=5)
    for status, at in ((Status.ROUTED, 100), (Status.STARTED, 200), (Status.INPUT_REQUIRED, 300)):
        row = fold(row, receipt(status, at, asked=question if status is Status.INPUT_REQUIRED else None))
    assert row is not None
    return row


def test_a_question_needs_text_and_a_valid_schema() -> None:
    assert question_of("Name?", NAME).schema_text == json.dumps(NAME, separators=(",", ":"), sort_keys=True)
    assert question_of("Anything?").schema_text == "{}"
    for bad, schema, words in (("", None, "non-empty"), ("x" * 3000, None, "at most"),
                               ("Name?", {"type": "nope"}, "not a valid JSON Schema"),
                               ("Name?", ["list"], "dict or a boolean")):
        with pytest.raises(BadQuestion, match=words):
            question_of(bad, schema)


def test_an_answer_is_checked_against_the_question_schema() -> None:
    schema = json.dumps(NAME)
    assert answer_problem(schema, {"name": "Ada"}) is None
    assert "name" in (answer_problem(schema, {"nom": "Ada"}) or "")
    assert answer_problem(schema, "Ada") is not None


def test_input_required_waits_keeps_the_question_and_no_clock_but_the_deadline_runs() -> None:
    row = waiting()
    assert row.status is Status.INPUT_REQUIRED and not row.terminal
    assert row.input is not None and row.input.question == "What is your name?"
    assert row.delivery_due_at is None  # no delivery clock: the timekeeper never reroutes it
    assert due_tasks([row], 59_999) == []
    [task] = due_tasks([row], 60_000)  # the budget's own deadline still ends it
    assert task.due is Due.EXPIRE


def test_the_answer_opens_the_next_generation_and_the_row_keeps_the_turns() -> None:
    row = waiting()
    answered = InputRequest(question="What is your name?", answer_schema="{}", turn=1, answer='{"name":"Ada"}')
    row = fold(row, receipt(Status.ACCEPTED, 400, generation=1, asked=answered))
    assert (row.generation, row.status, row.input) == (1, Status.ACCEPTED, None)
    assert [(t.turn, t.generation, t.answer) for t in row.turns] == [(1, 1, '{"name":"Ada"}')]
    row = fold(row, receipt(Status.COMPLETED, 500, generation=1))
    assert row.terminal and row.turns[0].question == "What is your name?"
    late = fold(row, receipt(Status.INPUT_REQUIRED, 600))  # an old generation's redelivered question
    assert late.status is Status.COMPLETED and late.generation == 1


def test_a_row_refuses_answers_when_not_waiting_another_tenant_or_past_the_deadline() -> None:
    row = waiting().model_dump(mode="json")
    assert refusal(row, tenant="acme", now_ms=1_000) is None
    assert refusal(row, tenant=None, now_ms=1_000) is None  # an operator answers any tenant's
    other = refusal(row, tenant="globex", now_ms=1_000)
    assert other is not None and other.status == 404
    late = refusal(row, tenant="acme", now_ms=60_000)
    assert late is not None and (late.status, late.code) == (410, "expired")
    done = refusal({**row, "status": "COMPLETED"}, tenant="acme", now_ms=1_000)
    assert done is not None and (done.status, done.code) == (409, "not_waiting")


def test_a_wrong_or_oversize_answer_is_refused_with_the_question() -> None:
    row = waiting().model_dump(mode="json")
    assert checked_answer(row, {"name": "Ada"}).answer == '{"name":"Ada"}'
    with pytest.raises(AnswerRefused, match="does not satisfy") as wrong:
        checked_answer(row, {"nom": "Ada"})
    assert wrong.value.status == 400 and "What is your name?" in wrong.value.hint
    with pytest.raises(AnswerRefused) as big:
        checked_answer(row, {"name": "x" * 40_000})
    assert big.value.status == 413


def test_the_next_turn_is_the_next_generation_with_the_conversation() -> None:
    asking = new_envelope("demo.interview", {"greeting": "hello"}, tenant="acme", idempotency_key="biz")
    asking = asking.model_copy(update={"attempt": 3, "excluded_instances": ["i9"]})
    answered = InputRequest(question="Name?", answer_schema=json.dumps(NAME), turn=1, answer='{"name":"Ada"}',
                            origin_topic="t", origin_partition=0, origin_offset=1)
    envelope, accepted = next_turn(asking, answered, agent_id="agent://demo/interview", instance_id="i-7", now_ms=5)
    assert (envelope.message_id, envelope.generation, envelope.attempt) == (asking.message_id, 1, 1)
    assert envelope.excluded_instances == [] and envelope.to_agent == "agent://demo/interview"
    assert envelope.payload == asking.payload and envelope.deadline == asking.deadline
    assert envelope.idempotency_key == "biz"  # held by this message_id: the next turn may take it
    assert conversation(envelope.headers) == (Turn(1, "Name?", NAME, {"name": "Ada"}),)
    assert envelope.headers[PREFER_HEADER] == "i-7" and envelope.routing.session_key == asking.message_id
    assert (accepted.status, accepted.generation, accepted.input and accepted.input.answer) == (
        Status.ACCEPTED, 1, '{"name":"Ada"}')


def test_the_conversation_is_bounded_in_turns_and_bytes_oldest_dropped_and_counted() -> None:
    headers: dict[str, str] = {}
    for i in range(1, MAX_TURNS + 5):
        headers = with_turn(headers, Turn(i, f"q{i}", {}, i))
    turns = conversation(headers)
    assert len(turns) == MAX_TURNS and turns[-1].turn == MAX_TURNS + 4 and headers[DROPPED_HEADER] == "4"
    big = {}
    for i in range(1, 6):
        big = with_turn(big, Turn(i, "q", {}, "x" * 20_000))
    assert len(json.dumps([t.answer for t in conversation(big)])) <= MAX_CONVERSATION_BYTES
    assert conversation(big)[-1].turn == 5 and int(big[DROPPED_HEADER]) >= 2
    assert conversation({"reach-turns": "not json"}) == ()
