"""NeedsInput through the pipeline on in-memory seams: an INPUT_REQUIRED receipt with the question, its schema and
the inbox position, the lease given back (nothing cached as an ending); the next turn's handler reads ctx.turns."""

from __future__ import annotations

import asyncio
import json
from typing import Any

from reach.agent import Agent, Context, NeedsInput
from reach.agent.outcomes import Outcome, from_result, receipt_status
from reach.core.turns import BadQuestion, Turn, with_turn
from reach.records import Status, StepStatus
from tests.unit.agent.fakes import FakeLeases, FakeSender
from tests.unit.agent.test_pipeline import envelope, pipeline

NAME = {"type": "object", "required": ["name"], "properties": {"name": {"type": "string"}}}


def interview() -> Agent:
    agent = Agent("agent://test/unit", instance_id="i-1", lease_margin_ms=100)

    @agent.capability("test.unit", version="1.0.0", input_schema={"type": "object"})
    async def ask(_payload: Any, ctx: Context) -> Any:
        if ctx.answer is None:
            return NeedsInput("What is your name?", NAME)
        return {"greeting": f"Hello, {ctx.answer['name']}!", "turns": len(ctx.turns)}

    return agent


def test_needs_input_is_an_outcome_value() -> None:
    verdict = from_result(NeedsInput("Name?"))
    assert verdict.outcome is Outcome.INPUT
    assert receipt_status(Outcome.INPUT) == (Status.INPUT_REQUIRED, StepStatus.OK)


def test_a_question_ends_the_turn_input_required_with_where_its_envelope_is() -> None:
    sender, leases = FakeSender(), FakeLeases()
    pipe = pipeline(interview(), sender, leases)
    done = asyncio.run(pipe.process(envelope(), [], origin=("ns.agent.test.unit", 2, 41)))
    assert done.outcome is Outcome.INPUT
    started, asked = sender.receipts()
    assert (started.status, asked.status) == (Status.STARTED, Status.INPUT_REQUIRED)
    assert asked.input is not None and asked.input.question == "What is your name?" and asked.input.turn == 1
    assert json.loads(asked.input.answer_schema) == NAME
    assert (asked.input.origin_topic, asked.input.origin_partition, asked.input.origin_offset) == (
        "ns.agent.test.unit", 2, 41)
    assert leases.results == {} and leases.leases == {}  # not an ending: nothing cached, the lease given back


def test_the_next_turn_reads_the_conversation_and_completes() -> None:
    sender, leases = FakeSender(), FakeLeases()
    pipe = pipeline(interview(), sender, leases)
    headers = with_turn({}, Turn(1, "What is your name?", NAME, {"name": "Ada"}))
    done = asyncio.run(pipe.process(envelope(generation=1, headers=headers), []))
    assert done.outcome is Outcome.COMPLETE
    ended = sender.receipts()[-1]
    assert ended.status is Status.COMPLETED and ended.generation == 1
    assert json.loads(ended.result or b"") == {"greeting": "Hello, Ada!", "turns": 1}


def test_a_bad_question_raises_in_the_handler() -> None:
    agent = Agent("agent://test/unit", instance_id="i-1", lease_margin_ms=100)
    seen: list[str] = []

    @agent.capability("test.unit", version="1.0.0", input_schema={"type": "object"})
    async def careless(_payload: Any, ctx: Context) -> Any:
        try:
            return NeedsInput("Name?", {"type": "no-such-type"})
        except BadQuestion as exc:
            seen.append(str(exc))
            return {"asked": False}

    sender = FakeSender()
    assert asyncio.run(pipeline(agent, sender, FakeLeases()).process(envelope(), [])).outcome is Outcome.COMPLETE
    assert seen and "not a valid JSON Schema" in seen[0]


def test_a_redelivered_turn_republishes_its_question_without_asking_again() -> None:
    calls: list[int] = []
    agent = Agent("agent://test/unit", instance_id="i-1", lease_margin_ms=100)

    @agent.capability("test.unit", version="1.0.0", input_schema={"type": "object"})
    async def ask(_payload: Any, ctx: Context) -> Any:
        calls.append(1)
        return NeedsInput("What is your name?", NAME)

    sender, leases = FakeSender(), FakeLeases()
    pipe, env = pipeline(agent, sender, leases), envelope()
    assert asyncio.run(pipe.process(env, [])).outcome is Outcome.INPUT
    assert asyncio.run(pipe.process(env, [])).outcome is Outcome.INPUT  # the broker redelivers the same turn
    assert calls == [1]
    first, second = [r for r in sender.receipts() if r.status is Status.INPUT_REQUIRED]
    assert first == second


def test_a_turn_that_asks_carries_the_usage_it_reported() -> None:
    # the usage counter charges the receipt that ends a generation; a turn that asks ran the model too
    agent = Agent("agent://test/unit", instance_id="i-1", lease_margin_ms=100)

    @agent.capability("test.unit", version="1.0.0", input_schema={"type": "object"})
    async def ask(_payload: Any, ctx: Context) -> Any:
        ctx.usage(input_tokens=30, output_tokens=7, model="m")
        return NeedsInput("Anything else?")

    sender = FakeSender()
    asyncio.run(pipeline(agent, sender, FakeLeases()).process(envelope(), [], origin=("ns.agent.test.unit", 0, 1)))
    asked = sender.receipts()[-1]
    assert asked.status is Status.INPUT_REQUIRED and asked.usage is not None
    assert (asked.usage.input_tokens, asked.usage.output_tokens, asked.usage.model) == (30, 7, "m")
