"""A2A over in-memory fakes, driven by the official a2a-sdk client: a handler's NeedsAuth reads auth-required (the
question and its schema in the status message) and is answered like NeedsInput; the cards state both extensions;
a push config set with the push-progress extension also gets the handler's progress and chunks."""

from __future__ import annotations

import json
import time
from collections.abc import Awaitable, Callable
from typing import Any

from a2a.client.client import ClientCallContext
from a2a.client.service_parameters import ServiceParametersFactory, with_a2a_extensions
from a2a.types.a2a_pb2 import GetTaskRequest, Message, Part, SendMessageRequest, TaskPushNotificationConfig, TaskState
from google.protobuf.json_format import MessageToDict, ParseDict
from google.protobuf.struct_pb2 import Value

from reach.a2a import cards, push, tasks
from reach.a2a.pushbook import MemoryPushBook
from reach.agent import NeedsAuth
from reach.core.turns import KIND, answer_problem, kind_of
from reach.envelopes import new_envelope
from reach.kafka import codec
from reach.records import Status
from tests.unit.gateway import test_a2a_push_routes as push_routes
from tests.unit.gateway.fakes import Fakes
from tests.unit.gateway.test_a2a_routes import Following, events, run, send_request

INBOX = ("ns.agent.demo.pay", 0, 3)
GRANT = {"type": "object", "required": ["grant"], "properties": {"grant": {"type": "string"}}}


def test_needs_auth_is_a_question_whose_schema_says_it_asks_for_authorization() -> None:
    asked = NeedsAuth("Approve the charge of 12 EUR at https://pay.example/approve/42", GRANT)
    schema = json.loads(asked.schema_text)
    assert schema[KIND] == "auth" and kind_of(asked.schema_text) == "auth"
    assert answer_problem(asked.schema_text, {"grant": "g-1"}) is None  # the annotation asks nothing of the answer
    assert answer_problem(asked.schema_text, {}) is not None
    assert kind_of(NeedsAuth("Sign in first").schema_text) == "auth"
    assert kind_of('{"type": "object"}') == "input" and kind_of("{not json") == "input"


def waiting(message_id: str, schema: dict[str, Any]) -> dict[str, Any]:
    return {"message_id": message_id, "trace_id": "t", "tenant": "acme", "capability": "demo.pay",
            "generation": 0, "status": "INPUT_REQUIRED", "attempt": 1, "agent_id": "agent://demo/pay",
            "deadline": int(time.time() * 1000) + 60_000, "updated_at": 5,
            "timeline": [{"status": s, "attempt": 1, "generation": 0, "at": i}
                         for i, s in enumerate(("ACCEPTED", "ROUTED", "STARTED", "INPUT_REQUIRED"))],
            "input": {"question": "Approve the charge", "answer_schema": json.dumps(schema), "turn": 1,
                      "answer": None, "origin_topic": INBOX[0], "origin_partition": INBOX[1],
                      "origin_offset": INBOX[2]}}


def test_an_auth_question_reads_auth_required_in_the_task_and_its_stream_updates() -> None:
    row = waiting("m1", json.loads(NeedsAuth("Approve the charge", GRANT).schema_text))
    task = tasks.task_of(row)
    assert task.status.state == TaskState.TASK_STATE_AUTH_REQUIRED
    assert task.status.message.parts[0].text == "Approve the charge"
    assert MessageToDict(task.status.message.parts[1].data)["answer_schema"]["required"] == ["grant"]
    updates, _, last = tasks.updates(row, 0, None)
    assert [u.status.state for u in updates] == [TaskState.TASK_STATE_SUBMITTED, TaskState.TASK_STATE_WORKING,
                                                 TaskState.TASK_STATE_AUTH_REQUIRED]
    assert last == TaskState.TASK_STATE_AUTH_REQUIRED
    assert tasks.task_of(waiting("m2", GRANT)).status.state == TaskState.TASK_STATE_INPUT_REQUIRED


def test_an_auth_required_task_is_answered_with_its_task_id_like_input() -> None:
    fakes = Fakes()
    fakes.status = Following(fakes)
    asking = new_envelope("demo.pay", {}, tenant="acme")
    fakes.turns.inbox[INBOX] = codec.encode(asking)
    fakes.status.rows[asking.message_id] = [waiting(asking.message_id,
                                                    json.loads(NeedsAuth("Approve", GRANT).schema_text))]
    mid = asking.message_id

    async def scenario(connect: Callable[..., Awaitable[Any]]) -> None:
        client = await connect()
        task = await client.get_task(GetTaskRequest(id=mid))
        assert task.status.state == TaskState.TASK_STATE_AUTH_REQUIRED
        request = SendMessageRequest(message=Message(message_id="grant-1", task_id=mid,
                                                     parts=[Part(data=ParseDict({"grant": "g-1"}, Value()))]))
        request.configuration.return_immediately = True
        [sent] = await events(client, request)
        assert sent.task.id == mid
        [(envelope, accepted)] = fakes.turns.published
        assert envelope.generation == 1 and accepted.status is Status.ACCEPTED
        assert accepted.input is not None and json.loads(accepted.input.answer or "{}") == {"grant": "g-1"}

    run(fakes, scenario)


def test_the_cards_state_how_a_task_asks_back_and_the_push_progress_opt_in() -> None:
    plain = cards.mesh_card("http://gw", [], push=False)
    drafts = [cards.IDEMPOTENCY_EXTENSION, cards.SKILL_EXTENSION, cards.BUDGET_EXTENSION]  # until A2A v1.1
    assert [e.uri for e in plain.capabilities.extensions] == [cards.TURNS_EXTENSION, *drafts]
    assert "auth-required" in plain.capabilities.extensions[0].description
    pushing = cards.mesh_card("http://gw", [], push=True)
    assert [e.uri for e in pushing.capabilities.extensions] == [cards.TURNS_EXTENSION, *drafts,
                                                                cards.PUSH_PROGRESS_EXTENSION]
    assert not any(e.required for e in pushing.capabilities.extensions)


def test_a_config_set_with_the_push_progress_extension_also_gets_progress_and_chunks() -> None:
    fakes, book = Fakes(), MemoryPushBook()
    fakes.status = Following(fakes)
    progress = ClientCallContext(service_parameters=ServiceParametersFactory.create(
        [with_a2a_extensions([cards.PUSH_PROGRESS_EXTENSION])]))

    async def scenario(connect: Callable[..., Awaitable[Any]]) -> None:
        client = await connect()
        [done] = await events(client, send_request("hi"))
        task_id = done.task.id
        await client.create_task_push_notification_config(
            TaskPushNotificationConfig(task_id=task_id, id="states", url=push_routes.URL))
        await client.create_task_push_notification_config(
            TaskPushNotificationConfig(task_id=task_id, id="all", url=push_routes.URL), context=progress)
        kept = book.get(task_id)
        assert kept is not None
        assert {c.id: (c.states, c.progress) for c in kept.configs} == {"states": (True, False),
                                                                        "all": (True, True)}
        row = {"message_id": task_id, "trace_id": "t", "status": "STARTED", "generation": 0,
               "timeline": [{"status": "STARTED", "attempt": 1, "generation": 0, "at": 1}],
               "progress": {"attempt": 1, "at": 2, "fraction": 0.5, "note": "half",
                            "chunks": [{"seq": 0, "kind": "text", "data": "Hel", "append": True}]}}
        events_of = {c.id: [n.body.get("event") for n in push.notifications(row, c)] for c in kept.configs}
        assert events_of == {"states": [None], "all": [None, "progress", "chunk"]}

    push_routes.run(fakes, book, scenario)
