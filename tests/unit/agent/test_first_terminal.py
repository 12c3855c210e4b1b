"""The SDK's side of the first-terminal-wins fence (reach.terminals): the agent's result cache is the register,
and a run that finishes after someone else ended its message publishes that first ending, not its own."""

from __future__ import annotations

from typing import Any

from reach import codec
from reach.agent import TransientError
from reach.agent.outcomes import Outcome
from reach.receipts import receipt_for
from reach.records import Envelope, ErrorInfo, Status
from tests.unit.agent.fakes import FakeLeases, FakeSender
from tests.unit.agent.test_pipeline import NAMES, agent_with, envelope, pipeline, run, statuses


def expired_by_timekeeper(env: Envelope) -> bytes:
    return codec.encode(receipt_for(env, Status.EXPIRED, error=ErrorInfo(kind="BUDGET", code="DEADLINE_EXCEEDED",
                                                                         message="spent")))


def test_a_run_finishing_after_the_message_expired_publishes_the_expiry() -> None:
    sender, leases = FakeSender(), FakeLeases()
    env = envelope()
    expired = expired_by_timekeeper(env)
    runs: list[int] = []

    def slow(payload: Any) -> Any:  # the timekeeper EXPIRES it while the handler runs
        runs.append(1)
        leases.results[env.message_id, env.generation] = expired
        return payload

    pipe = pipeline(agent_with(slow), sender, leases)
    run(pipe, env)
    assert runs == [1], "the handler ran (its side effect is what it is)"
    assert statuses(sender) == [Status.STARTED, Status.EXPIRED]
    assert sender.on(NAMES.receipts)[-1].value == expired, "the winner's bytes"
    assert leases.results[env.message_id, env.generation] == expired
    assert not leases.leases, "the lease is dropped all the same"


def test_a_message_the_router_ended_is_not_run_on_a_later_delivery() -> None:
    sender, leases = FakeSender(), FakeLeases()
    env = envelope()
    leases.results[env.message_id, env.generation] = expired_by_timekeeper(env)
    runs: list[int] = []
    pipe = pipeline(agent_with(lambda p: runs.append(1) or p), sender, leases)
    assert run(pipe, env) is Outcome.FAIL
    assert runs == [] and statuses(sender) == [Status.EXPIRED]


def test_a_rejection_after_someone_else_ended_the_message_publishes_that_ending() -> None:
    sender, leases = FakeSender(), FakeLeases()
    env = envelope(capability="test.other")  # this agent does not serve it: REJECTED, unless it ended already
    leases.results[env.message_id, env.generation] = expired_by_timekeeper(env)
    run(pipeline(agent_with(lambda p: p), sender, leases), env)
    assert statuses(sender) == [Status.EXPIRED]


def failing_last_attempt(leases: FakeLeases, env: Envelope, *, ended_meanwhile: bool) -> Any:
    def flaky(_payload: Any) -> Any:
        if ended_meanwhile:
            leases.results[env.message_id, env.generation] = expired_by_timekeeper(env)
        raise TransientError("down")

    return flaky


def test_retries_exhausted_after_the_message_ended_write_no_dead_letter() -> None:
    sender, leases = FakeSender(), FakeLeases()
    env = envelope(attempt=4, max_attempts=4)
    run(pipeline(agent_with(failing_last_attempt(leases, env, ended_meanwhile=True)), sender, leases), env)
    assert sender.on(NAMES.dlq) == [], "no dead letter for a message that had ended"
    assert statuses(sender) == [Status.STARTED, Status.ATTEMPT_FAILED, Status.EXPIRED]


def test_a_won_dead_letter_is_cached_with_its_letter_and_republished_whole() -> None:
    sender, leases = FakeSender(), FakeLeases()
    env = envelope(attempt=4, max_attempts=4)
    pipe = pipeline(agent_with(failing_last_attempt(leases, env, ended_meanwhile=False)), sender, leases)
    run(pipe, env)
    [letter] = sender.on(NAMES.dlq)
    assert statuses(sender)[-1] is Status.DEAD_LETTERED
    assert leases.results[env.message_id, env.generation] == sender.on(NAMES.receipts)[-1].value
    again = FakeSender()  # a redelivery (say the crash came right after the claim): the letter and its receipt
    pipe = pipeline(agent_with(failing_last_attempt(leases, env, ended_meanwhile=False)), again, leases)
    run(pipe, env)
    assert again.on(NAMES.dlq) == [letter] and statuses(again) == [Status.DEAD_LETTERED]
