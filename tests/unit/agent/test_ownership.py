"""After a freeze an instance starts no handler until the group has had its say; a lost partition's records never."""

from __future__ import annotations

import asyncio
import threading
import time

from reach.agent.ownership import Ownership
from reach.envelopes import new_envelope
from tests.unit.agent.fakes import FakeLeases, FakeSender
from tests.unit.agent.test_pipeline import agent_with, pipeline


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def owning(*partitions: int) -> tuple[Ownership, Clock]:
    clock = Clock()
    ownership = Ownership(stale_s=3.0, settle_s=3.0, clock=clock)
    ownership.assigned(partitions)
    return ownership, clock


def test_an_owned_partition_is_admitted_while_the_ticks_are_current() -> None:
    ownership, clock = owning(0, 1)
    clock.now += 0.25
    ownership.tick()
    assert ownership.admits(0) is True
    assert ownership.admits(2) is False, "never assigned"
    ownership.revoked([1])
    assert ownership.admits(1) is False


def test_after_a_freeze_nothing_starts_until_the_settle_time_has_passed() -> None:
    ownership, clock = owning(0, 1)
    clock.now += 15.0  # SIGSTOP for 15 s: no tick ran
    assert ownership.admits(0) is None, "stale ticks: wait, whichever thread runs first after SIGCONT"
    ownership.tick()  # the ticker notices the gap
    assert ownership.freezes == 1
    assert ownership.admits(0) is None, "the coordinator's answer is still due"
    ownership.revoked([0])  # librdkafka's on_lost, served by the consumer's next poll
    clock.now += 3.0
    ownership.tick()
    assert ownership.admits(0) is False, "lost: its new owner runs it"
    assert ownership.admits(1) is True, "kept through the freeze: runs after the settle time"


def test_a_gap_shorter_than_the_stale_time_is_no_freeze() -> None:
    ownership, clock = owning(0)
    clock.now += 2.5
    ownership.tick()
    assert ownership.freezes == 0 and ownership.admits(0) is True


def test_a_record_whose_partition_was_lost_during_the_claim_is_not_run_and_its_lease_is_released() -> None:
    calls: list[object] = []
    sender, leases = FakeSender(), FakeLeases()
    ownership, clock = owning(3)
    pipe = pipeline(agent_with(lambda p: calls.append(p) or p), sender, leases)
    gate_asked = threading.Event()

    async def admitted(partition: int) -> bool:
        if gate_asked.is_set():  # the second question, after the claim came back: the freeze cost the partition
            ownership.revoked([partition])
        gate_asked.set()
        return await ownership.admitted(partition)

    pipe._admitted = admitted
    env = new_envelope("test.unit", {"x": 1})
    processed = asyncio.run(pipe.process(env, [], origin=("ns.agent.x", 3, 10)))
    assert processed.outcome is None and processed.acks == ()
    assert calls == [] and sender.receipts() == [], "no handler, no STARTED, no terminal"
    assert (env.message_id, env.generation) not in leases.leases, "the next owner may claim it at once"


def test_a_waiting_record_starts_once_the_settle_time_passed_with_the_partition_kept() -> None:
    calls: list[object] = []
    sender, leases = FakeSender(), FakeLeases()
    ownership = Ownership(stale_s=3.0, settle_s=0.3)
    ownership.assigned([3])
    ownership._ticked -= 10  # a freeze just ended
    ownership.tick()
    pipe = pipeline(agent_with(lambda p: calls.append(p) or p), sender, leases)
    pipe._admitted = ownership.admitted
    started = time.monotonic()
    processed = asyncio.run(pipe.process(new_envelope("test.unit", {"x": 1}), [], origin=("t", 3, 1)))
    assert time.monotonic() - started >= 0.25
    assert processed.outcome is not None and calls == [{"x": 1}]
