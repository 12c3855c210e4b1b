"""An ending published while Redis was out reaches the first-terminal register once Redis answers again
(reach.agent.ending.Unfenced), so a later reroute or expiry finds it instead of ending the message a second time."""

from __future__ import annotations

import asyncio
from typing import Any

from reach.agent.ending import Unfenced, claim_ending
from reach.agent.outage import Outage
from reach.kafka import codec
from reach.receipts import receipt_for
from reach.records import ErrorInfo, Status
from tests.unit.agent.fakes import FakeLeases, FakeSender
from tests.unit.agent.test_pipeline import Clock, agent_with, envelope, pipeline, run, statuses


def test_a_completion_published_while_redis_was_out_is_claimed_before_the_next_message_runs() -> None:
    sender, leases, clock, unfenced = FakeSender(), FakeLeases(), Clock(), Unfenced()
    pipe = pipeline(agent_with(lambda p: p), sender, leases, clock=clock, unfenced=unfenced)
    first = envelope({"x": 1})
    leases.down = True
    run(pipe, first)
    assert statuses(sender) == [Status.COMPLETED], "availability first: it went out unfenced"
    assert not leases.results and len(unfenced) == 1
    completed = sender.on("ns.receipts")[-1].value

    leases.down = False
    clock.now += 1.0  # past the backoff
    run(pipe, envelope({"x": 2}))
    assert leases.results[first.message_id, first.generation] == completed, "the first ending is in the register"
    assert len(unfenced) == 0 and unfenced.claimed == 1 and unfenced.twice == 0

    # the timekeeper's reroute of the first message (its row behind) now peeks this ending, not an empty register
    expired = codec.encode(receipt_for(first, Status.EXPIRED, error=ErrorInfo(kind="BUDGET", code="X", message="x")))
    other = FakeLeases("timekeeper", shared=leases)
    assert asyncio.run(other.finish(first.message_id, first.generation, expired)) == completed


def test_a_retry_step_dead_letter_published_while_redis_was_out_is_claimed_too() -> None:
    def failing(_payload: Any) -> Any:
        from reach.agent import TransientError
        raise TransientError("down")

    sender, leases, clock, unfenced = FakeSender(), FakeLeases(), Clock(), Unfenced()
    pipe = pipeline(agent_with(failing), sender, leases, clock=clock, unfenced=unfenced)
    last = envelope(max_attempts=1)
    leases.down = True
    run(pipe, last)
    assert statuses(sender)[-1] is Status.DEAD_LETTERED and len(unfenced) == 1
    leases.down = False
    clock.now += 1.0
    asyncio.run(unfenced.settle(Outage(), leases))
    assert leases.results[last.message_id, last.generation] == sender.on("ns.receipts")[-1].value


def test_settle_waits_out_the_backoff_keeps_what_redis_did_not_answer_and_counts_a_second_ending() -> None:
    leases, clock = FakeLeases(), Clock()
    outage = Outage(base_s=1.0, max_s=1.0, clock=clock)
    unfenced = Unfenced()
    leases.down = True
    assert asyncio.run(claim_ending(outage, leases, "m1", 0, b"ours-1", unfenced=unfenced)) == b"ours-1"
    unfenced.add("m2", 0, b"ours-2")
    leases.down = False
    asyncio.run(unfenced.settle(outage, leases))
    assert len(unfenced) == 2 and leases.calls == 1, "still backing off: not asked"

    leases.results["m2", 0] = b"router-ending"  # the router ended m2 meanwhile (its claim found nothing)
    clock.now += 1.0
    asyncio.run(unfenced.settle(outage, leases))
    assert len(unfenced) == 0 and leases.results["m1", 0] == b"ours-1"
    assert (unfenced.claimed, unfenced.twice) == (1, 1)

    leases.down = True
    unfenced.add("m3", 0, b"ours-3")
    asyncio.run(unfenced.settle(outage, leases))
    assert len(unfenced) == 1, "Redis did not answer: kept for the next try"


def test_the_backlog_is_bounded_oldest_first() -> None:
    unfenced = Unfenced(max_entries=2)
    for i in range(3):
        unfenced.add(f"m{i}", 0, b"e")
    unfenced.add("m1", 0, b"e")  # a repeat moves to the newest
    leases = FakeLeases()
    asyncio.run(unfenced.settle(Outage(), leases))
    assert unfenced.dropped == 1 and set(leases.results) == {("m1", 0), ("m2", 0)}
