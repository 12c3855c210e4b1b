"""Failure classes -> actions, backoff with jitter, tier choice: the retry policy in microseconds."""

from __future__ import annotations

import random

import pytest

from reach.core.retry import Action, Failure, Limits, backoff_ms, classify, tier_for, tier_ms
from reach.envelopes import new_envelope
from reach.records import Policy

LIM = Limits()


def act(failure: Failure, attempt: int = 1, reroutes: int = 0, now: int = 0, deadline: int = 10**12) -> Action:
    return classify(failure, attempt=attempt, reroutes=reroutes, limits=LIM, now_ms=now, deadline_ms=deadline)


def test_failure_classes() -> None:
    assert act(Failure.DELIVERY) is Action.REROUTE
    assert act(Failure.DELIVERY, reroutes=3) is Action.RETRY, "after 3 reroutes it counts as an attempt"
    assert act(Failure.TRANSIENT, attempt=1) is Action.RETRY
    assert act(Failure.TRANSIENT, attempt=4) is Action.DEAD_LETTER
    assert act(Failure.BUSINESS) is Action.FAIL
    assert act(Failure.FAULTY_ENVELOPE) is Action.REJECT
    assert act(Failure.TRANSIENT, now=5, deadline=5) is Action.EXPIRE
    assert act(Failure.BUDGET_SPENT) is Action.EXPIRE


def test_backoff_doubles_is_capped_and_jittered_within_20_percent() -> None:
    rng = random.Random(7)
    assert [backoff_ms(a, LIM, rng)[0] for a in (1, 2, 3, 4)] == [200, 400, 800, 1600]
    assert backoff_ms(20, LIM, rng)[0] == 30_000
    for attempt in range(1, 10):
        nominal, jittered = backoff_ms(attempt, LIM, rng)
        assert 0.8 * nominal <= jittered <= 1.2 * nominal


def test_limits_come_from_envelope_then_policy_then_default() -> None:
    env = new_envelope("demo.echo", {})
    assert Limits.resolve(env).max_attempts == 4
    assert Limits.resolve(env, Policy(max_attempts=2, backoff_base_ms=50)).max_attempts == 2
    assert Limits.resolve(env, Policy(backoff_base_ms=50)).base_ms == 50
    assert Limits.resolve(env.model_copy(update={"max_attempts": 6}), Policy(max_attempts=2)).max_attempts == 6


@pytest.mark.parametrize(("delay", "tier"), [(100, "1s"), (1_000, "1s"), (1_500, "10s"), (12_000, "60s"),
                                             (600_000, "60s")])
def test_tier_is_the_shortest_covering_the_delay(delay: int, tier: str) -> None:
    assert tier_for(delay, ["1s", "10s", "60s"]) == tier


def test_tier_names() -> None:
    assert [tier_ms(t) for t in ("500ms", "1s", "10m", "1h")] == [500, 1000, 600_000, 3_600_000]
    with pytest.raises(ValueError, match="must look like"):
        tier_ms("soon")


def test_planned_retry_excludes_the_failed_instance_and_is_due_after_the_jittered_delay() -> None:
    from reach.failures import plan_retry
    from reach.kafka import codec
    from reach.names import Names
    from reach.records import Envelope

    env = new_envelope("demo.echo", {"x": 1}, session_key="s1").model_copy(update={"attempt": 2})
    plan = plan_retry(env, names=Names("ns"), tiers=["1s", "10s", "60s"], limits=LIM, failed_instance="i-1",
                      now_ms=1_000, rng=random.Random(3))
    assert plan.nominal_ms == 400 and 320 <= plan.delay_ms <= 480 and plan.due_at == 1_000 + plan.delay_ms
    assert plan.record.topic == "ns.retry.1s" and plan.record.key == "s1"
    again = codec.decode(plan.record.value or b"", Envelope)
    assert (again.attempt, again.excluded_instances, again.message_id) == (3, ["i-1"], env.message_id)
    assert dict(plan.record.headers)["x-reach-target"] == b"ns.cap.demo.echo"
    hinted = plan_retry(env, names=Names("ns"), tiers=["1s", "10s"], limits=LIM, failed_instance=None,
                        now_ms=0, retry_after_ms=5_000)
    assert (hinted.delay_ms, hinted.record.topic) == (5_000, "ns.retry.10s")


def test_after_failure_is_one_decision_for_the_sdk_and_the_timekeeper() -> None:
    from reach.failures import after_failure
    from reach.kafka import codec
    from reach.names import Names
    from reach.records import DeadLetter, Envelope, ErrorInfo, Status

    names, err = Names("ns"), ErrorInfo(kind="TRANSIENT", code="BOOM", message="it broke")
    env = new_envelope("demo.echo", {"x": 1})
    deadline = env.deadline

    def decide(failure: Failure, envelope: Envelope, now: int = 0) -> tuple[Action, list[str], Status]:
        d = after_failure(failure, envelope, error=err, names=names, tiers=["1s"], limits=LIM, now_ms=now,
                          failed_instance="i-1", raw=b"raw", origin=("ns.agent.x", 2, 7), agent_id="agent://x/y")
        return d.action, [r.topic for r in d.records], d.receipt.status

    assert decide(Failure.TRANSIENT, env) == (Action.RETRY, ["ns.retry.1s", "ns.receipts"], Status.RETRY_SCHEDULED)
    assert decide(Failure.DELIVERY, env) == (Action.REROUTE, ["ns.cap.demo.echo", "ns.receipts"], Status.ACCEPTED)
    last = env.model_copy(update={"attempt": LIM.max_attempts})
    assert decide(Failure.TRANSIENT, last) == (Action.DEAD_LETTER, ["ns.dlq", "ns.receipts"], Status.DEAD_LETTERED)
    assert decide(Failure.TRANSIENT, env, now=deadline) == (Action.EXPIRE, ["ns.receipts"], Status.EXPIRED)
    letter = after_failure(Failure.TRANSIENT, last, error=err, names=names, tiers=["1s"], limits=LIM, now_ms=0,
                           failed_instance="i-1", raw=b"raw", origin=("ns.agent.x", 2, 7)).records[0]
    record = codec.decode(letter.value or b"", DeadLetter)
    assert record.envelope == b"raw" and (record.origin_partition, record.origin_offset) == (2, 7)
    assert record.error and record.error.code == "RETRIES_EXHAUSTED" and "BOOM: it broke" in record.error.message
    rerouted = after_failure(Failure.DELIVERY, env, error=err, names=names, tiers=["1s"], limits=LIM, now_ms=0,
                             failed_instance="i-1", raw=b"raw", origin=("ns.agent.x", 2, 7))
    forwarded = codec.decode(rerouted.records[0].value or b"", Envelope)
    assert (forwarded.reroutes, forwarded.excluded_instances, rerouted.receipt.reroutes) == (1, ["i-1"], 1)


def test_a_retry_that_would_be_due_past_the_deadline_is_not_scheduled_it_expires() -> None:
    from reach.failures import after_failure
    from reach.names import Names
    from reach.records import ErrorInfo, Status

    env = new_envelope("demo.echo", {"x": 1}, budget_ms=1_000)
    err = ErrorInfo(kind="TRANSIENT", code="BOOM", message="it broke")
    now = env.created_at + 900  # 100 ms left; the backoff (or the agent's hint) asks for more
    for hint in (None, 5_000):
        d = after_failure(Failure.TRANSIENT, env, error=err, names=Names("ns"), tiers=["1s", "10s"],
                          limits=Limits(base_ms=200), now_ms=now, failed_instance="i-1", raw=b"raw",
                          origin=("ns.agent.x", 0, 1), retry_after_ms=hint, rng=random.Random(1))
        assert d.action is Action.EXPIRE and [r.topic for r in d.records] == ["ns.receipts"]
        assert d.receipt.status is Status.EXPIRED and d.receipt.error is not None
        assert d.receipt.error.code == "DEADLINE_EXCEEDED" and "at or after the deadline" in d.receipt.error.message
    early = after_failure(Failure.TRANSIENT, env, error=err, names=Names("ns"), tiers=["1s"], limits=Limits(),
                          now_ms=env.created_at, failed_instance="i-1", raw=b"raw", origin=("ns.agent.x", 0, 1))
    assert early.action is Action.RETRY, "a retry due before the deadline is still scheduled"


def test_the_sdk_retry_step_expires_a_retry_past_the_deadline() -> None:
    import asyncio

    from reach.agent.outcomes import Outcome, Verdict
    from reach.agent.retrying import RetryStep
    from reach.names import Names
    from reach.records import ErrorInfo, Status
    from tests.unit.agent.fakes import FakeLeases, FakeSender

    sender = FakeSender()
    step = RetryStep(agent_id="agent://x/y", instance_id="i-1", publisher=sender, names=Names("ns"),
                     tiers=["1s"], leases=FakeLeases(),
                     policy=lambda _c: Policy(backoff_base_ms=60_000, backoff_max_ms=120_000))
    env = new_envelope("demo.echo", {}, budget_ms=30_000)
    verdict = Verdict(Outcome.RETRY, error=ErrorInfo(kind="TRANSIENT", code="BOOM", message="it broke"))
    asyncio.run(step.after_failure(env, verdict, None, None))
    assert [r.status for r in sender.receipts()] == [Status.EXPIRED] and not sender.on("ns.retry.1s")
