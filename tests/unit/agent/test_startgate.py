"""STARTED within the grace (reach.agent.startgate): a short run's terminal carries its start instead, a longer run
sends STARTED when the grace ends, and STARTED still comes first before anything else a run publishes."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any

import pytest

from reach.agent import Agent, Context
from reach.agent.exceptions import InvalidDeclaration
from reach.agent.outcomes import Outcome
from reach.agent.startgate import STARTED_AT, Graces, StartGate
from reach.envelopes import now_ms
from reach.records import Status
from tests.unit.agent.fakes import FakeLeases, FakeSender
from tests.unit.agent.test_pipeline import agent_with, envelope, pipeline, run, statuses


def test_a_run_that_ends_within_the_grace_sends_no_started_and_its_completed_carries_the_start() -> None:
    async def handler(payload: Any) -> dict[str, int]:
        return {"n": 1}

    sender = FakeSender()
    before = now_ms()
    assert run(pipeline(agent_with(handler), sender, FakeLeases()), envelope()) is Outcome.COMPLETE
    [completed] = sender.receipts()
    assert completed.status is Status.COMPLETED
    assert before <= completed.timings[STARTED_AT] <= completed.at


def test_a_run_longer_than_the_grace_sends_started_when_the_grace_ends_and_no_start_on_its_terminal() -> None:
    seen: list[list[Status]] = []
    sender = FakeSender()

    async def handler(payload: Any) -> dict[str, int]:
        await asyncio.sleep(0.01)
        seen.append(statuses(sender))  # within the grace: nothing yet
        await asyncio.sleep(0.4)
        seen.append(statuses(sender))  # past it: STARTED is out while the handler still runs
        return {"n": 1}

    assert run(pipeline(agent_with(handler, started_grace_ms=200), sender, FakeLeases()), envelope()) \
        is Outcome.COMPLETE
    assert seen == [[], [Status.STARTED]]
    assert statuses(sender) == [Status.STARTED, Status.COMPLETED]
    assert STARTED_AT not in sender.receipts()[-1].timings


def test_progress_within_the_grace_sends_started_first() -> None:
    async def handler(payload: Any, ctx: Context) -> dict[str, int]:
        await ctx.progress(0.5, "half")
        return {"n": 1}

    sender = FakeSender()
    run(pipeline(agent_with(handler, started_grace_ms=10_000), sender, FakeLeases()), envelope())
    assert statuses(sender) == [Status.STARTED, Status.PROGRESS, Status.COMPLETED]
    assert STARTED_AT not in sender.receipts()[-1].timings


def test_a_retry_within_the_grace_still_follows_its_started() -> None:
    async def handler(payload: Any) -> dict[str, int]:
        raise ConnectionError("the model's API is down")

    sender = FakeSender()
    assert run(pipeline(agent_with(handler), sender, FakeLeases()), envelope()) is Outcome.RETRY
    assert statuses(sender) == [Status.STARTED, Status.ATTEMPT_FAILED, Status.RETRY_SCHEDULED]


def test_a_grace_of_zero_sends_started_as_the_run_starts() -> None:
    sender = FakeSender()

    async def handler(payload: Any) -> dict[str, int]:
        assert statuses(sender) == [Status.STARTED]
        return {"n": 1}

    assert run(pipeline(agent_with(handler, started_grace_ms=0), sender, FakeLeases()), envelope()) \
        is Outcome.COMPLETE
    assert statuses(sender) == [Status.STARTED, Status.COMPLETED]
    assert STARTED_AT not in sender.receipts()[-1].timings


def test_a_negative_grace_is_refused() -> None:
    with pytest.raises(InvalidDeclaration, match="started_grace_ms"):
        Agent("agent://test/unit", started_grace_ms=-1)


def test_one_timer_sends_the_started_of_every_run_still_open_when_its_grace_ends() -> None:
    sent: list[str] = []

    def sender(name: str) -> Callable[[], Future[Any]]:
        def send() -> Future[Any]:
            sent.append(name)
            done: Future[Any] = Future()
            done.set_result(None)
            return done
        return send

    graces = Graces(0.05)  # one per pipeline, which a test may run on more than one loop

    async def runs() -> list[int | None]:
        acks: list[Future[Any]] = []
        gates = {name: StartGate(sender(name), started_ms=n, graces=graces, acks=acks)
                 for n, name in enumerate(["a", "b", "c"])}
        skipped = [gates["b"].skip()]  # b ended within its grace
        await asyncio.sleep(0.2)
        skipped += [gates["a"].skip(), gates["c"].skip()]  # too late: their STARTED went out
        assert len(acks) == 2
        return skipped

    assert asyncio.run(runs()) == [1, None, None]
    assert sent == ["a", "c"]
    sent.clear()
    assert asyncio.run(runs()) == [1, None, None] and sent == ["a", "c"], "a second loop is served as well"
