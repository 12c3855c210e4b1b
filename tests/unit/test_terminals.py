"""The first-terminal-wins fence (reach.terminals) on its in-memory store: who wins, what a loser gets back, and
an unreachable store (availability first, counted, logged once per interval, backed off)."""

from __future__ import annotations

import pytest

from reach.kafka import codec
from reach.records import ErrorInfo, Receipt, Status
from reach.terminals import Claimed, Fence, MemorySlots, Terminal, result_key


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_the_first_claim_wins_and_a_later_one_gets_the_winners_bytes() -> None:
    fence = Fence(MemorySlots(), writer="test")
    [first] = fence.claim([Terminal("m", 0, b"completed")])
    assert first.won and first.receipt == b"completed"
    [late] = fence.claim([Terminal("m", 0, b"expired")])
    assert not late.won and late.receipt == b"completed"
    [other_generation] = fence.claim([Terminal("m", 1, b"expired")])
    assert other_generation.won, "a new generation is a new message"
    assert fence.lost == 1 and fence.unfenced == 0


def test_two_terminals_of_one_message_in_one_batch_keep_the_first() -> None:
    slots = MemorySlots()
    claims = Fence(slots, writer="test").claim([Terminal("m", 0, b"a"), Terminal("m", 0, b"b")])
    assert [(c.won, c.receipt) for c in claims] == [(True, b"a"), (False, b"a")]
    assert slots.calls == 1


def test_peek_sees_winners_and_never_claims() -> None:
    slots = MemorySlots()
    fence = Fence(slots, writer="test")
    assert fence.peek([("m", 0)]) == [None]
    fence.claim([Terminal("m", 0, b"done")])
    assert fence.peek([("m", 0), ("n", 0)]) == [b"done", None]
    assert fence.peek([]) == [] and fence.claim([]) == []


def test_an_unreachable_store_lets_every_writer_publish_its_own(caplog: pytest.LogCaptureFixture) -> None:
    clock, slots = Clock(), MemorySlots()
    fence = Fence(slots, writer="test", log_every_s=60, clock=clock)
    slots.down = True
    assert [c.won for c in fence.claim([Terminal("a", 0, b"x"), Terminal("b", 0, b"y")])] == [True, True]
    assert fence.unfenced == 2
    fence.claim([Terminal("c", 0, b"z")])  # backing off: the store is not asked
    assert slots.calls == 1 and fence.unfenced == 3
    assert fence.peek([("a", 0)]) == [None]
    clock.now = 30.0
    fence.claim([Terminal("d", 0, b"z")])
    assert sum("without the first-terminal-wins fence" in m for m in caplog.messages) == 1, "once per interval"
    slots.down = False
    clock.now = 61.0
    assert fence.claim([Terminal("a", 0, b"again")])[0].won, "the outage forgot nothing it did not store"
    assert any("answers again" in m for m in caplog.messages)


def test_without_a_store_the_fence_is_open_and_says_so_once(caplog: pytest.LogCaptureFixture) -> None:
    fence = Fence(None, writer="test")
    assert not fence.enabled
    for n in range(3):
        assert fence.claim([Terminal(str(n), 0, b"x")])[0].won
    assert fence.unfenced == 3
    assert sum("no Redis is configured" in m for m in caplog.messages) == 1


def test_the_register_is_the_agents_result_cache() -> None:
    from reach.agent.idempotency import Leases

    class NoRedis:
        def register_script(self, _s: str) -> None:
            return None

    leases = Leases(NoRedis(), namespace="ns", owner="i", result_ttl_s=1)  # type: ignore[arg-type]
    assert leases.result_key("m", 3) == result_key("ns", "m", 3) == "ns:result:{m}:3"


def test_an_empty_message_id_is_never_fenced() -> None:
    slots = MemorySlots()
    fence = Fence(slots, writer="test")
    claims = fence.claim([Terminal("", 0, b"a"), Terminal("", 0, b"b")])
    assert [(c.won, c.receipt) for c in claims] == [(True, b"a"), (True, b"b")], "two faulty envelopes, two endings"
    assert slots.calls == 0 and not slots.values


def _ending(status: Status, code: str | None, at: int) -> bytes:
    error = ErrorInfo(kind="INVALID_INPUT", code=code, message="why") if code else None
    return codec.encode(Receipt(message_id="m1", trace_id="t", tenant="d", capability="demo.echo", status=status,
                                at=at, error=error))


def test_a_writers_own_earlier_ending_counts_as_won_with_the_stored_bytes() -> None:
    fence = Fence(MemorySlots(), writer="router")
    first = _ending(Status.DEAD_LETTERED, "NO_ROUTE", at=1)
    fence.claim([Terminal("m1", 0, first)])
    [again] = fence.claim([Terminal("m1", 0, _ending(Status.DEAD_LETTERED, "NO_ROUTE", at=2))], again=True)
    assert again.won and again.receipt == first, "its own first decision: won, the stored bytes"
    [other] = fence.claim([Terminal("m1", 0, _ending(Status.DEAD_LETTERED, "BAD_TARGET", at=3))], again=True)
    assert not other.won and other.receipt == first, "another ending (another code) loses"
    [status] = fence.claim([Terminal("m1", 0, _ending(Status.REJECTED, "NO_ROUTE", at=4))], again=True)
    assert not status.won
    [once] = fence.claim([Terminal("m1", 0, _ending(Status.DEAD_LETTERED, "NO_ROUTE", at=5))])
    assert not once.won, "without `again` (a writer that never decides a record twice) it loses"
    assert fence.lost == 3


def test_claim_once_keeps_a_position_that_won_this_round_and_records_every_win() -> None:
    slots = MemorySlots()
    fence = Fence(slots, writer="t")
    won: dict[tuple[str, int, int], bytes] = {}
    first = fence.claim_once([(("t", 0, 1), Terminal("m", 0, b"dead-lettered")), (("t", 0, 2), None)], won)
    assert first == [Claimed(b"dead-lettered", won=True), None] and won == {("t", 0, 1): b"dead-lettered"}
    calls = slots.calls
    # its letter refused for good: the re-reject of the same record keeps the slot's receipt, with no round trip
    [again] = fence.claim_once([(("t", 0, 1), Terminal("m", 0, b"rejected"))], won)
    assert again == Claimed(b"dead-lettered", won=True) and slots.calls == calls
