"""The in-process record of runs: a redelivery to the instance that ran a message never runs its handler again,
with Redis out (the fault suite's leader-sigkill window), forgetful (flushed) or answering; bounded in entries,
bytes and age."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import pytest

from reach.agent import Agent, TransientError
from reach.agent.exceptions import InvalidDeclaration
from reach.agent.outcomes import Outcome
from reach.agent.recentruns import ENTRY_OVERHEAD_BYTES, Ran, RecentRuns, Running
from reach.records import Status
from tests.unit.agent.fakes import FakeLeases, FakeSender
from tests.unit.agent.test_pipeline import Clock, agent_with, envelope, pipeline, run, statuses


def counting(runs: list[Any]) -> Agent:
    return agent_with(lambda p: runs.append(p["x"]) or p)


def test_with_redis_down_a_redelivery_of_a_finished_message_resends_its_terminal_without_the_handler() -> None:
    runs: list[Any] = []
    sender, leases = FakeSender(), FakeLeases()
    clock = Clock()
    pipe = pipeline(counting(runs), sender, leases, clock=clock)
    env = envelope({"x": 7})
    assert run(pipe, env) is Outcome.COMPLETE  # Redis up: ended and cached
    leases.down = True  # a connect timeout under load: leases and caches are off; the status table lags
    clock.now += 1.0
    assert run(pipe, env) is Outcome.COMPLETE
    assert runs == [7], "the redelivery did not run the handler again"
    first, again = [r for r in sender.receipts() if r.status is Status.COMPLETED]
    assert again == first, "the same terminal receipt, re-sent"


def test_a_message_that_ended_while_redis_was_down_is_not_rerun_when_redis_is_still_down() -> None:
    runs: list[Any] = []
    asked: list[str] = []
    sender, leases = FakeSender(), FakeLeases()
    leases.down = True

    async def table(message_id: str, _generation: int) -> None:  # the status table has not folded it yet
        asked.append(message_id)

    clock = Clock()
    pipe = pipeline(counting(runs), sender, leases, clock=clock, completed=table)
    env = envelope({"x": 1})
    assert run(pipe, env) is Outcome.COMPLETE
    clock.now += 1.0
    assert run(pipe, env) is Outcome.COMPLETE
    assert runs == [1]
    assert asked == [env.message_id], "the second delivery needed no status table round trip"
    assert statuses(sender) == [Status.COMPLETED, Status.COMPLETED]  # a run within the grace: no STARTED


def test_redis_back_but_flushed_the_recorded_terminal_wins_the_register_again() -> None:
    runs: list[Any] = []
    sender, leases = FakeSender(), FakeLeases()
    pipe = pipeline(counting(runs), sender, leases)
    env = envelope({"x": 2})
    assert run(pipe, env) is Outcome.COMPLETE
    leases.results.clear()  # FLUSHALL: the claim calls the message ours
    assert run(pipe, env) is Outcome.COMPLETE
    assert runs == [2]
    assert (env.message_id, env.generation) in leases.results, "the re-sent ending is the register's again"
    assert not leases.leases, "the redelivery's lease was dropped with it"


def test_with_redis_down_a_redelivered_attempt_whose_retry_was_published_is_not_run_again() -> None:
    runs: list[int] = []

    def flaky(_payload: Any) -> Any:
        runs.append(1)
        raise TransientError("down")

    sender, leases = FakeSender(), FakeLeases()
    leases.down = True
    clock = Clock()
    pipe = pipeline(agent_with(flaky), sender, leases, clock=clock)
    env = envelope()
    assert run(pipe, env) is Outcome.RETRY
    clock.now += 1.0
    assert run(pipe, env) is Outcome.RETRY
    assert runs == [1] and len(sender.on("ns.retry.1s")) == 1, "no second run, no forked retry chain"
    assert run(pipe, env.model_copy(update={"attempt": 2})) is Outcome.RETRY
    assert runs == [1, 1], "the retry itself (attempt 2) runs"


def test_with_redis_down_a_delivery_of_a_message_running_here_waits_for_it_and_does_not_run() -> None:
    runs: list[int] = []
    release = threading.Event()

    def slow(payload: Any) -> Any:
        runs.append(1)
        release.wait(5)
        return payload

    sender, leases = FakeSender(), FakeLeases()
    leases.down = True
    pipe = pipeline(agent_with(slow), sender, leases)
    env = envelope({"x": 4})

    async def both() -> list[Outcome | None]:
        first = asyncio.ensure_future(pipe.process(env, []))
        while not runs:
            await asyncio.sleep(0.005)
        second = asyncio.ensure_future(pipe.process(env, []))
        await asyncio.sleep(0.05)
        assert not second.done(), "the second delivery waits for the running one"
        release.set()
        return [p.outcome for p in await asyncio.gather(first, second)]

    assert asyncio.run(both()) == [Outcome.COMPLETE, Outcome.COMPLETE]
    assert runs == [1]
    assert [s for s in statuses(sender) if s is Status.COMPLETED] == [Status.COMPLETED, Status.COMPLETED]


def test_a_run_stopped_without_an_outcome_is_forgotten_so_its_redelivery_runs() -> None:
    runs: list[int] = []

    async def stuck_once(payload: Any) -> Any:
        runs.append(1)
        if len(runs) == 1:
            await asyncio.sleep(60)
        return payload

    sender, leases = FakeSender(), FakeLeases()
    leases.down = True
    pipe = pipeline(agent_with(stuck_once), sender, leases)
    env = envelope()

    async def cancelled_then_redelivered() -> Outcome | None:
        task = asyncio.ensure_future(pipe.process(env, []))
        while not runs:
            await asyncio.sleep(0.005)
        task.cancel()  # shutdown
        with pytest.raises(asyncio.CancelledError):
            await task
        return (await pipe.process(env, [])).outcome

    assert asyncio.run(cancelled_then_redelivered()) is Outcome.COMPLETE
    assert runs == [1, 1], "no outcome was published, so the redelivery ran it"


def test_the_record_is_bounded_in_entries_bytes_and_age() -> None:
    clock = Clock()
    runs = RecentRuns(max_runs=3, max_bytes=10 * ENTRY_OVERHEAD_BYTES, ttl_s=60, clock=clock)
    for i in range(5):
        assert runs.begin(f"m{i}", 1, 1) is None
        runs.ended(f"m{i}", 1, Ran(1, Outcome.COMPLETE, b"r"))
    assert len(runs) == 3 and runs.find("m0", 1) is None and runs.find("m4", 1) is not None
    runs.ended("big", 1, Ran(1, Outcome.COMPLETE, b"x" * (8 * ENTRY_OVERHEAD_BYTES)))
    assert runs.bytes <= 10 * ENTRY_OVERHEAD_BYTES and runs.find("big", 1) is not None
    clock.now += 60
    assert runs.find("big", 1) is None, "older than its time: forgotten"
    runs.ended("new", 1, Ran(1, Outcome.COMPLETE, b"r"))
    assert len(runs) == 1, "the expired went with the next insert"


def test_an_evicted_running_entry_lets_its_waiter_go_on() -> None:
    runs = RecentRuns(max_runs=1)

    async def waited() -> Ran | None:
        assert runs.begin("a", 1, 1) is None
        found = runs.find("a", 1)
        assert isinstance(found, Running)
        waiter = asyncio.ensure_future(found.wait())
        await asyncio.sleep(0)
        assert runs.begin("b", 1, 1) is None  # evicts a
        return await waiter

    assert asyncio.run(waited()) is None


def test_a_terminal_is_never_hidden_by_a_later_non_terminal_note_and_a_later_attempt_may_begin() -> None:
    runs = RecentRuns()
    runs.ended("m", 1, Ran(1, Outcome.RETRY))
    assert runs.begin("m", 1, 1) == Ran(1, Outcome.RETRY), "the same attempt: already ended here"
    assert runs.begin("m", 1, 2) is None, "its retry may run"
    runs.ended("m", 1, Ran(2, Outcome.FAIL, b"failed"))
    runs.ended("m", 1, Ran(3, Outcome.RETRY))
    assert runs.begin("m", 1, 4) == Ran(2, Outcome.FAIL, b"failed")
    assert runs.begin("m", 2, 1) is None, "the next generation is another run"


def test_bad_bounds_are_refused() -> None:
    with pytest.raises(ValueError, match="must be >= 0"):
        RecentRuns(max_runs=-1)
    with pytest.raises(InvalidDeclaration, match="recent_runs"):
        Agent("agent://test/unit", recent_runs=-1)


def test_recent_runs_zero_keeps_no_record_and_redis_down_reruns_as_before() -> None:
    runs: list[Any] = []
    sender, leases = FakeSender(), FakeLeases()
    clock = Clock()
    pipe = pipeline(counting(runs), sender, leases, clock=clock, runs=RecentRuns(max_runs=0))
    env = envelope({"x": 5})
    assert run(pipe, env) is Outcome.COMPLETE
    leases.down = True
    clock.now += 1.0
    assert run(pipe, env) is Outcome.COMPLETE
    assert runs == [5, 5], "at least once: without the record, the status table is all there is"
