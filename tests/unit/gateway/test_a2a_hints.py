"""A2A's coming idempotency, skill id and budget on the mesh endpoint, with the official a2a-sdk client: a retried
first message with the same Idempotency-Key (header or metadata.idempotencyKey) makes one task; skill_id picks the
capability and its version range; a budget becomes the envelope's; bad values of each are invalid params."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import pytest
from a2a.client import ClientCallContext
from a2a.types.a2a_pb2 import Message, Part, SendMessageRequest, TaskState
from a2a.utils.errors import A2AError
from google.protobuf.json_format import MessageToDict
from google.protobuf.struct_pb2 import Struct

from reach.a2a import hints, tasks
from tests.unit.gateway.fakes import Fakes
from tests.unit.gateway.test_a2a_routes import Following, run

Connect = Callable[..., Awaitable[Any]]


@pytest.fixture
def fakes() -> Fakes:
    made = Fakes()
    made.status = Following(made)
    return made


def message(payload: str, message_id: str, **metadata: Any) -> SendMessageRequest:
    meta = Struct()
    meta.update({"skill_id": "demo.echo", **metadata})
    return SendMessageRequest(message=Message(message_id=message_id, parts=[Part(text=payload)], metadata=meta))


async def sent(client: Any, request: SendMessageRequest, key: str | None = None) -> Any:
    context = ClientCallContext(service_parameters={"Idempotency-Key": key}) if key else None
    return [e async for e in client.send_message(request, context=context)][-1]


def test_a_retried_first_message_with_the_same_idempotency_key_makes_one_task(fakes: Fakes) -> None:
    async def scenario(connect: Connect) -> None:
        client = await connect()
        first = await sent(client, message("order 7", "m-1"), key="order-7-attempt")
        retry = await sent(client, message("order 7", "m-2"), key="order-7-attempt")  # a new message id: a retry
        assert retry.task.id == first.task.id and len(fakes.publisher.sent) == 1
        [envelope] = fakes.publisher.sent
        assert envelope.idempotency_key == "gateway:app1:a2a-key:order-7-attempt"
        by_field = await sent(client, message("order 8", "m-3", idempotencyKey="order-8"))
        again = await sent(client, message("order 8", "m-4", idempotencyKey="order-8"))
        assert again.task.id == by_field.task.id and len(fakes.publisher.sent) == 2
        other = await sent(client, message("order 9", "m-5"), key="order-7-attempt")  # the key, another content
        assert other.task.status.state == TaskState.TASK_STATE_REJECTED and len(fakes.publisher.sent) == 2
        for bad in ("has space", "x" * 201):
            with pytest.raises(A2AError, match="is not a key"):
                await sent(client, message("order 10", f"m-{bad[:3]}"), key=bad)
        with pytest.raises(A2AError, match="metadata.idempotencyKey must be a string"):
            await sent(client, message("order 10", "m-6", idempotencyKey=7))
        assert len(fakes.publisher.sent) == 2

    run(fakes, scenario)


def test_skill_id_picks_the_capability_and_version_and_a_budget_travels(fakes: Fakes) -> None:
    async def scenario(connect: Connect) -> None:
        client = await connect()
        budget = {hints.BUDGET_EXTENSION: {hints.TOKEN_LIMIT: 2000, hints.COST_LIMIT: 0.25}}
        await sent(client, message("hi", "s-1", skill_id="demo.echo@^1.0", **budget))
        [envelope] = fakes.publisher.sent
        assert (envelope.capability, envelope.capability_version) == ("demo.echo", "^1.0")
        assert (envelope.max_tokens, envelope.max_cost_micros) == (2000, 250_000)
        for bad, why in (("Demo Echo", "names no skill"), ("demo.echo@not a range", "names no skill")):
            with pytest.raises(A2AError, match=why):
                await sent(client, message("hi", f"s-{why[:2]}-{len(bad)}", skill_id=bad))
        for value in (-1, "lots", 1.5):
            with pytest.raises(A2AError, match="token_budget"):
                await sent(client, message("hi", f"b-{value}", **{hints.BUDGET_EXTENSION: {hints.TOKEN_LIMIT: value}}))
        with pytest.raises(A2AError, match="must be an object"):
            await sent(client, message("hi", "b-list", **{hints.BUDGET_EXTENSION: [1]}))
        endpoint = await connect("/a2a/cap/demo.echo/")
        with pytest.raises(A2AError, match="is not this endpoint's"):
            await sent(endpoint, message("hi", "s-other", skill_id="demo.other"))
        assert len(fakes.publisher.sent) == 1

    run(fakes, scenario)


def test_a_tasks_metadata_reports_what_it_and_its_children_spent() -> None:
    row = {"message_id": "m1", "trace_id": "t", "status": "COMPLETED", "capability": "demo.echo",
           "usage": {"input_tokens": 10, "output_tokens": 5, "model": "m", "cost_micros": 120, "currency": "EUR"},
           "children_usage": {"input_tokens": 3, "output_tokens": 1, "cost_micros": 20}}
    report = MessageToDict(tasks.task_of(row).metadata)[hints.BUDGET_EXTENSION]
    assert report["usage"]["gen_ai.usage.input_tokens"] == 10 and report["usage"]["cost_micros"] == 120
    assert report["children_usage"]["gen_ai.usage.output_tokens"] == 1
    assert hints.BUDGET_EXTENSION not in MessageToDict(tasks.task_of({**row, "usage": None,
                                                                       "children_usage": None}).metadata)


def test_the_bridges_first_message_carries_its_key_and_what_is_left_of_the_budget() -> None:
    meta = MessageToDict(hints.outgoing("m1-0", {"max_tokens": 900, "max_cost_micros": 250_000}))
    assert meta == {hints.IDEMPOTENCY_FIELD: "m1-0",
                    hints.BUDGET_EXTENSION: {hints.TOKEN_LIMIT: 900, hints.COST_LIMIT: 0.25}}
    assert MessageToDict(hints.outgoing("m1-0", {})) == {hints.IDEMPOTENCY_FIELD: "m1-0"}
