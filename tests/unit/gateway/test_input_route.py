"""POST /v1/messages/{id}:input and A2A message/send with a task id over in-memory fakes: the answer checked
against the question's schema, the next turn published as the next generation; refusals with their statuses."""

from __future__ import annotations

import json
import time
from typing import Any

import httpx
import pytest
from fastapi.testclient import TestClient

from reach.callers import KeyEntry
from reach.channels.settings import ClosureSettings
from reach.core.turns import conversation
from reach.envelopes import new_envelope
from reach.gateway.httpsettings import HttpSettings
from reach.gateway.service import build_gateway
from reach.kafka import codec
from reach.records import Status
from tests.unit.gateway.fakes import Fakes, app, sign

NAME = {"type": "object", "required": ["name"], "properties": {"name": {"type": "string"}}}
INBOX = ("ns.agent.demo.interview", 0, 7)


def post(client: TestClient, path: str, body: Any) -> httpx.Response:
    data = json.dumps(body).encode()
    return client.post(path, content=data, headers={"Reach-Key": "key1", "Content-Type": "application/json",
                                                    "Reach-Signature": sign(b"secret-1", data, target=path)})


def waiting_row(message_id: str, **update: Any) -> dict[str, Any]:
    return {"message_id": message_id, "trace_id": "t", "tenant": "acme", "capability": "demo.interview",
            "generation": 0, "status": "INPUT_REQUIRED", "attempt": 1, "agent_id": "agent://demo/interview",
            "deadline": int(time.time() * 1000) + 60_000, "updated_at": 1, "timeline": [],
            "input": {"question": "What is your name?", "answer_schema": json.dumps(NAME), "turn": 1,
                      "answer": None, "origin_topic": INBOX[0], "origin_partition": INBOX[1],
                      "origin_offset": INBOX[2]}, **update}


@pytest.fixture
def fakes() -> Fakes:
    made = Fakes()
    asking = new_envelope("demo.interview", {}, tenant="acme")
    made.turns.inbox[INBOX] = codec.encode(asking)
    made.status.rows[asking.message_id] = [waiting_row(asking.message_id)]
    made.asking_id = asking.message_id  # type: ignore[attr-defined]
    return made


@pytest.fixture
def client(fakes: Fakes) -> TestClient:
    return TestClient(build_gateway(fakes.deps(), HttpSettings(), closure=ClosureSettings()))


def test_an_answer_starts_the_next_turn(client: TestClient, fakes: Fakes) -> None:
    mid = fakes.asking_id  # type: ignore[attr-defined]
    resp = post(client, f"/v1/messages/{mid}:input", {"message_id": mid, "answer": {"name": "Ada"}})
    assert resp.status_code == 202, resp.text
    assert resp.json()["generation"] == 1 and resp.json()["turn"] == 1
    [(envelope, accepted)] = fakes.turns.published
    assert (envelope.message_id, envelope.generation, envelope.to_agent) == (mid, 1, "agent://demo/interview")
    assert conversation(envelope.headers)[-1].answer == {"name": "Ada"}
    assert accepted.status is Status.ACCEPTED and accepted.input and accepted.input.answer == '{"name":"Ada"}'
    again = post(client, f"/v1/messages/{mid}:input", {"message_id": mid, "answer": {"name": "Bob"}})
    assert again.status_code == 409 and again.json()["error"] == "already_answered"


def test_a_wrong_answer_is_400_naming_the_question(client: TestClient, fakes: Fakes) -> None:
    mid = fakes.asking_id  # type: ignore[attr-defined]
    resp = post(client, f"/v1/messages/{mid}:input", {"message_id": mid, "answer": {"nom": "Ada"}})
    assert resp.status_code == 400 and resp.json()["error"] == "invalid_answer"
    assert "What is your name?" in resp.json()["hint"] and fakes.turns.published == []


@pytest.mark.parametrize(("update", "status", "error"), [
    ({"status": "COMPLETED", "input": None}, 409, "not_waiting"),
    ({"tenant": "globex"}, 404, "not_found"),
    ({"deadline": 1}, 410, "expired"),
])
def test_an_answer_the_message_cannot_take_is_refused(client: TestClient, fakes: Fakes, update: dict[str, Any],
                                                      status: int, error: str) -> None:
    mid = fakes.asking_id  # type: ignore[attr-defined]
    fakes.status.rows[mid] = [waiting_row(mid, **update)]
    resp = post(client, f"/v1/messages/{mid}:input", {"message_id": mid, "answer": {"name": "Ada"}})
    assert (resp.status_code, resp.json()["error"]) == (status, error) and fakes.turns.published == []


def test_the_body_must_name_the_message_and_carry_an_answer(client: TestClient, fakes: Fakes) -> None:
    mid = fakes.asking_id  # type: ignore[attr-defined]
    for body in ({"message_id": "other", "answer": 1}, {"message_id": mid}, [1]):
        resp = post(client, f"/v1/messages/{mid}:input", body)
        assert resp.status_code == 400 and resp.json()["error"] == "bad_request"
    assert post(client, "/v1/messages/nope:input", {"message_id": "nope", "answer": 1}).status_code == 404


def test_an_envelope_gone_from_its_inbox_is_410(client: TestClient, fakes: Fakes) -> None:
    mid = fakes.asking_id  # type: ignore[attr-defined]
    fakes.turns.inbox.clear()
    resp = post(client, f"/v1/messages/{mid}:input", {"message_id": mid, "answer": {"name": "Ada"}})
    assert (resp.status_code, resp.json()["error"]) == (410, "gone") and fakes.turns.claims == set()


def test_a2a_message_send_with_the_task_id_answers_and_reads_input_required(fakes: Fakes) -> None:
    """The official a2a-sdk client: GetTask shows input-required with the question; a message carrying the task id
    and a data part is the answer (the next turn); a wrong one is an invalid-params error."""
    from a2a.types.a2a_pb2 import GetTaskRequest, Message, Part, SendMessageRequest, TaskState
    from a2a.utils.errors import A2AError
    from google.protobuf.json_format import MessageToDict, ParseDict
    from google.protobuf.struct_pb2 import Value

    from tests.unit.gateway.test_a2a_routes import events, run

    mid = fakes.asking_id  # type: ignore[attr-defined]

    def answer(value: Any) -> SendMessageRequest:
        request = SendMessageRequest(message=Message(message_id=f"a-{json.dumps(value)}", task_id=mid,
                                                     parts=[Part(data=ParseDict(value, Value()))]))
        request.configuration.return_immediately = True
        return request

    async def scenario(connect: Any) -> None:
        client = await connect()
        task = await client.get_task(GetTaskRequest(id=mid))
        assert task.status.state == TaskState.TASK_STATE_INPUT_REQUIRED
        assert task.status.message.parts[0].text == "What is your name?"
        assert MessageToDict(task.status.message.parts[1].data) == {"answer_schema": NAME}
        with pytest.raises(A2AError, match="invalid_answer"):
            await events(client, answer({"nom": "Ada"}))
        [sent] = await events(client, answer({"name": "Ada"}))
        assert sent.task.id == mid
        [(envelope, _accepted)] = fakes.turns.published
        assert envelope.generation == 1 and conversation(envelope.headers)[-1].answer == {"name": "Ada"}

    run(fakes, scenario)


def test_an_answer_needs_the_apps_right_to_the_capability_it_runs() -> None:
    # review finding: an app limited to other capabilities answered a same-tenant message of a capability it may
    # not call; an answer starts a turn, so it is judged like a send (403 here; budget and quota the same way)
    fakes = Fakes(keys=[KeyEntry("key1", app(capabilities=("demo.other",), tenant="acme"), b"secret-1")])
    asking = new_envelope("demo.interview", {}, tenant="acme")
    fakes.turns.inbox[INBOX] = codec.encode(asking)
    fakes.status.rows[asking.message_id] = [waiting_row(asking.message_id)]
    mid = asking.message_id
    client = TestClient(build_gateway(fakes.deps(), HttpSettings(), closure=ClosureSettings()))
    resp = post(client, f"/v1/messages/{mid}:input", {"message_id": mid, "answer": {"name": "Ada"}})
    assert (resp.status_code, resp.json()["error"]) == (403, "forbidden")
    assert fakes.turns.published == [] and fakes.turns.claims == set()


def test_a_cancel_body_names_only_the_message(client: TestClient, fakes: Fakes) -> None:
    # review finding: an answer's signed body ({"message_id", "answer"}) also passed as a cancel's
    mid = fakes.asking_id  # type: ignore[attr-defined]
    resp = post(client, f"/v1/messages/{mid}:cancel", {"message_id": mid, "answer": {"name": "Ada"}})
    assert (resp.status_code, resp.json()["error"]) == (400, "bad_request")


def test_a2a_text_answer_fills_the_questions_one_string_property(fakes: Fakes) -> None:
    """A chat client answers in words (official a2a-sdk client, text parts): they fill `{"name": ...}`."""
    from a2a.types.a2a_pb2 import Message, Part, SendMessageRequest

    from tests.unit.gateway.test_a2a_routes import events, run

    mid = fakes.asking_id  # type: ignore[attr-defined]

    def said(*texts: str) -> SendMessageRequest:
        request = SendMessageRequest(message=Message(message_id=f"t-{len(texts)}-{texts[0][:8]}", task_id=mid,
                                                     parts=[Part(text=t) for t in texts]))
        request.configuration.return_immediately = True
        return request

    async def scenario(connect: Any) -> None:
        client = await connect()
        [sent] = await events(client, said("Ada ", "Lovelace"))
        assert sent.task.id == mid
        [(envelope, _accepted)] = fakes.turns.published
        assert conversation(envelope.headers)[-1].answer == {"name": "Ada Lovelace"}

    run(fakes, scenario)


def test_a_text_answer_that_fits_no_reading_says_what_to_send(client: TestClient, fakes: Fakes) -> None:
    mid = fakes.asking_id  # type: ignore[attr-defined]
    fakes.status.rows[mid] = [waiting_row(mid, input={**waiting_row(mid)["input"], "answer_schema": json.dumps(
        {"type": "object", "required": ["name", "age"], "properties": {"name": {"type": "string"},
                                                                        "age": {"type": "integer"}}})})]
    resp = post(client, f"/v1/messages/{mid}:input", {"message_id": mid, "answer": "Ada, 36"})
    assert (resp.status_code, resp.json()["error"]) == (400, "invalid_answer")
    assert 'send JSON like {"name": "...", "age": 1}' in resp.json()["hint"] and fakes.turns.published == []
    ok = post(client, f"/v1/messages/{mid}:input", {"message_id": mid, "answer": '{"name": "Ada", "age": 36}'})
    assert ok.status_code == 202, ok.text
    [(envelope, _accepted)] = fakes.turns.published
    assert conversation(envelope.headers)[-1].answer == {"name": "Ada", "age": 36}
