"""The SDK's side of the first-terminal-wins fence (reach.terminals): the agent's result cache is the register,
and a run that finishes after someone else ended its message publishes that first ending, not its own."""

from __future__ import annotations

from typing import Any

from reach.agent import TransientError
from reach.agent.idempotency import Claim, KeyScope
from reach.agent.outcomes import Outcome
from reach.failures import Outgoing
from reach.kafka import codec
from reach.receipts import receipt_for
from reach.records import Envelope, ErrorInfo, Receipt, Status
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
    assert statuses(sender) == [Status.EXPIRED]  # the run ended within the grace: no STARTED
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


def keyed(**update: Any) -> Envelope:
    return envelope(idempotency_key="order-42", **update)


class EndedAfterClaim(FakeLeases):
    """The timekeeper ends the message right after the agent's claim answered (and before it published)."""

    def __init__(self) -> None:
        super().__init__()
        self.end: Envelope | None = None

    async def claim(self, message_id: str, generation: int, attempt: int, ttl_ms: int,
                    scope: KeyScope | None = None) -> Claim:
        found = await super().claim(message_id, generation, attempt, ttl_ms, scope)
        if self.end is not None and self.end.message_id == message_id:
            self.results[message_id, generation] = expired_by_timekeeper(self.end)
        return found


def test_a_completed_run_that_lost_to_an_expiry_still_answers_its_idempotency_key() -> None:
    sender, leases = FakeSender(), FakeLeases()
    first, second = keyed(), keyed()
    runs: list[int] = []

    def charge(payload: Any) -> Any:  # the side effect happens, then the timekeeper's EXPIRED wins the register
        runs.append(1)
        leases.results[first.message_id, first.generation] = expired_by_timekeeper(first)
        return {"charged": len(runs)}

    pipe = pipeline(agent_with(charge), sender, leases)
    run(pipe, first)
    assert statuses(sender) == [Status.EXPIRED], "the message's outcome is the first terminal"
    assert run(pipe, second) is Outcome.COMPLETE
    assert runs == [1], "the key tracks the side effect: it happened once, the retry reuses it"
    reused = sender.receipts()[-1]
    assert (reused.status, reused.message_id, reused.reused_from) == (Status.COMPLETED, second.message_id,
                                                                      first.message_id)
    assert reused.result == b'{"charged":1}'


def test_a_reused_result_claims_the_register_of_the_message_reusing_it() -> None:
    sender, leases = FakeSender(), FakeLeases()
    first, second = keyed(), keyed()
    pipe = pipeline(agent_with(lambda p: p), sender, leases)
    run(pipe, first)
    run(pipe, second)
    reused = sender.on(NAMES.receipts)[-1].value
    assert leases.results[second.message_id, second.generation] == reused, "the router or timekeeper lose to it"
    run(pipe, second)  # a redelivery republishes the same ending
    assert codec.decode(sender.on(NAMES.receipts)[-1].value or b"", Receipt).reused_from == first.message_id


def test_a_reuse_racing_the_timekeepers_expiry_publishes_only_the_expiry() -> None:
    sender, leases = FakeSender(), EndedAfterClaim()
    first, second = keyed(), keyed()
    pipe = pipeline(agent_with(lambda p: p), sender, leases)
    run(pipe, first)
    leases.end = second
    assert run(pipe, second) is Outcome.FAIL
    assert [r.status for r in sender.receipts() if r.message_id == second.message_id] == [Status.EXPIRED]


def crashed_before_the_claim(leases: FakeLeases, env: Envelope) -> Outgoing:
    """The last attempt failed, its dead letter and receipt were cached, then the agent died before `finish`."""
    sender = FakeSender()
    run(pipeline(agent_with(failing_last_attempt(leases, env, ended_meanwhile=False)), sender, leases), env)
    del leases.results[env.message_id, env.generation]
    [letter] = sender.on(NAMES.dlq)
    return letter


def test_a_redelivery_after_a_crash_before_the_claim_claims_the_cached_dead_letter() -> None:
    leases, env = FakeLeases(), envelope(attempt=4, max_attempts=4)
    letter = crashed_before_the_claim(leases, env)
    sender = FakeSender()
    assert run(pipeline(agent_with(lambda p: p), sender, leases), env) is Outcome.FAIL
    assert sender.on(NAMES.dlq) == [letter] and statuses(sender) == [Status.DEAD_LETTERED]
    assert leases.results[env.message_id, env.generation] == sender.on(NAMES.receipts)[-1].value, \
        "claimed: a later router or timekeeper terminal loses to it"


def test_a_redelivery_of_a_cached_dead_letter_publishes_the_ending_that_won_meanwhile() -> None:
    leases, env = EndedAfterClaim(), envelope(attempt=4, max_attempts=4)
    crashed_before_the_claim(leases, env)
    leases.end = env
    sender = FakeSender()
    assert run(pipeline(agent_with(lambda p: p), sender, leases), env) is Outcome.FAIL
    assert sender.on(NAMES.dlq) == [], "no dead letter for a message that had ended"
    assert statuses(sender) == [Status.EXPIRED]
    assert sender.on(NAMES.receipts)[-1].value == leases.results[env.message_id, env.generation]
