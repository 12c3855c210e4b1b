"""ctx.heartbeat() on in-memory seams: it extends a run past its execution timeout, a quiet heartbeating handler is
cut, a beat after the lease went elsewhere (or after the run ended) raises LeaseLost and never stops the worker;
timeouts that make no sense are refused where they enter."""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any

import pytest

from reach.agent import Agent, Context, InvalidDeclaration, LeaseLost
from reach.agent.outcomes import Outcome
from reach.core.timeouts import BadTimeout
from reach.envelopes import new_envelope
from reach.ops import policy as ops_policy
from reach.records import AgentState, Policy, Status
from tests.unit.agent.fakes import FakeLeases, FakeSender
from tests.unit.agent.test_pipeline import agent_with, envelope, pipeline, run


def last_error_code(sender: FakeSender) -> str | None:
    error = sender.receipts()[-1].error
    return error.code if error else None


@pytest.mark.parametrize("is_async", [True, False])
def test_a_heartbeating_handler_runs_past_its_execution_timeout(is_async: bool) -> None:
    beats = 8

    async def beating(payload: Any, ctx: Context) -> Any:
        for _ in range(beats):
            await asyncio.sleep(0.05)
            ctx.heartbeat()
        return {"ok": True}

    def beating_sync(payload: Any, ctx: Context) -> Any:
        for _ in range(beats):
            time.sleep(0.05)
            ctx.heartbeat()
        return {"ok": True}

    sender = FakeSender()
    agent = agent_with(beating if is_async else beating_sync, execution_timeout_ms=150, heartbeat_timeout_ms=200)
    assert run(pipeline(agent, sender, FakeLeases()), envelope()) is Outcome.COMPLETE  # 400 ms > 150 ms
    assert sender.receipts()[-1].status is Status.COMPLETED


@pytest.mark.parametrize("is_async", [True, False])
def test_a_handler_that_stops_heartbeating_is_timed_out_before_its_execution_timeout(is_async: bool) -> None:
    gone = threading.Event()

    async def quiet(payload: Any, ctx: Context) -> Any:
        ctx.heartbeat()
        await asyncio.sleep(5)
        return {}

    def quiet_sync(payload: Any, ctx: Context) -> Any:
        ctx.heartbeat()
        gone.wait(5)
        return {}

    sender = FakeSender()
    agent = agent_with(quiet if is_async else quiet_sync, execution_timeout_ms=10_000, heartbeat_timeout_ms=100,
                       idempotent=True)  # a cut run is retried (ATTEMPT_FAILED) only when idempotent
    started = time.monotonic()
    try:
        assert run(pipeline(agent, sender, FakeLeases()), envelope()) is Outcome.RETRY
    finally:
        gone.set()
    assert time.monotonic() - started < 2, "cut at the heartbeat timeout, not the 10 s execution timeout"
    [failed] = [r for r in sender.receipts() if r.status is Status.ATTEMPT_FAILED]
    assert failed.error and failed.error.code == "HEARTBEAT_TIMEOUT" and "heartbeat_timeout_ms" in failed.error.message


def test_the_policy_cap_bounds_how_far_heartbeats_extend() -> None:
    async def forever(payload: Any, ctx: Context) -> Any:
        while True:
            await asyncio.sleep(0.02)
            ctx.heartbeat()

    sender = FakeSender()
    agent = agent_with(forever, execution_timeout_ms=10_000, heartbeat_timeout_ms=1_000, idempotent=True)
    assert run(pipeline(agent, sender, FakeLeases(), policy=Policy(execution_timeout_ms=200)), envelope()) \
        is Outcome.RETRY
    error = sender.receipts()[-1].error
    assert error is not None and error.code == "EXECUTION_TIMEOUT" and "200 ms" in error.message


def test_a_heartbeat_after_the_lease_went_to_another_run_raises_lease_lost() -> None:
    leases = FakeLeases()
    seen: list[BaseException] = []

    async def robbed(payload: Any, ctx: Context) -> Any:
        leases.leases[(ctx.envelope.message_id, ctx.envelope.generation)] = "another-instance"
        for _ in range(100):  # renewals (every lease/3, ~0.17 s) find the lease gone; beating keeps the run alive
            await asyncio.sleep(0.05)  # until then, however late a busy machine schedules them
            try:
                ctx.heartbeat()
            except LeaseLost as exc:
                seen.append(exc)
                raise
        return {}

    sender = FakeSender()
    agent = agent_with(robbed, execution_timeout_ms=400, heartbeat_timeout_ms=1_000)
    assert run(pipeline(agent, sender, leases), envelope()) is Outcome.RETRY
    assert last_error_code(sender) == "LEASE_LOST"
    assert seen and "lease was taken by another run" in str(seen[0]) and "stop this run" in str(seen[0])


def test_a_heartbeat_from_a_run_that_already_timed_out_raises_in_its_thread_and_the_worker_goes_on() -> None:
    release, beaten = threading.Event(), threading.Event()
    errors: list[BaseException] = []

    def lingering(payload: Any, ctx: Context) -> Any:
        release.wait(5)
        try:
            ctx.heartbeat()
        except LeaseLost as exc:
            errors.append(exc)
        beaten.set()
        return {}

    sender, leases = FakeSender(), FakeLeases()
    pipe = pipeline(agent_with(lingering, execution_timeout_ms=50), sender, leases)

    async def scenario() -> Outcome | None:
        first = (await pipe.process(envelope(), [])).outcome
        release.set()
        await asyncio.to_thread(beaten.wait, 5)
        assert (await pipe.process(envelope(), [])).outcome is Outcome.COMPLETE  # the next message still runs
        return first

    assert asyncio.run(scenario()) is Outcome.FAIL  # cut, and not idempotent: FAILED MAYBE_RAN, never rerun
    assert errors and "already ended" in str(errors[0])


def test_an_envelope_asking_for_a_negative_or_absurd_timeout_is_rejected_unrun() -> None:
    calls: list[Any] = []
    for bad in (-5, 10**9):
        sender = FakeSender()
        pipe = pipeline(agent_with(lambda p: calls.append(p) or p), sender, FakeLeases())
        assert run(pipe, envelope(execution_timeout_ms=bad)) is Outcome.REJECT
        [receipt] = sender.receipts()
        assert receipt.status is Status.REJECTED and receipt.error and receipt.error.code == "BAD_TIMEOUT"
        assert repr(bad) in receipt.error.message
    assert calls == []


def test_an_agent_declaring_a_negative_or_absurd_timeout_never_registers() -> None:
    for kwargs in ({"execution_timeout_ms": -1}, {"execution_timeout_ms": 90 * 24 * 3600 * 1000},
                   {"heartbeat_timeout_ms": 0}):
        with pytest.raises(InvalidDeclaration, match="must be a whole number of milliseconds"):
            Agent("agent://test/unit", **kwargs)


def test_the_declared_timeout_is_in_the_registration() -> None:
    agent = Agent("agent://demo/slow", execution_timeout_ms=30_000)
    agent.capability("demo.slow", version="1.0.0")(lambda p: p)
    record = agent.registration(state=AgentState.READY, heartbeat_at=0, inbox_topic="t", inflight=0,
                                assigned_partitions=[])
    assert record.execution_timeout_ms == 30_000


def test_the_default_envelope_leaves_the_timeout_to_the_agent_and_bad_asks_are_refused() -> None:
    assert new_envelope("demo.slow", {}).execution_timeout_ms == 0
    assert new_envelope("demo.slow", {}, execution_timeout_ms=5_000).execution_timeout_ms == 5_000
    with pytest.raises(BadTimeout, match="execution_timeout_ms"):
        new_envelope("demo.slow", {}, execution_timeout_ms=-1)


def test_a_policy_cap_that_makes_no_sense_is_refused() -> None:
    assert ops_policy.changes({"execution_timeout_ms": "3s"}) == {"execution_timeout_ms": 3_000}
    with pytest.raises(BadTimeout, match="--execution-timeout"):
        ops_policy.changes({"execution_timeout_ms": "5h"})
    with pytest.raises(BadTimeout):
        ops_policy.changes({"execution_timeout_ms": 0})
