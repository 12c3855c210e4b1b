"""reach.replypump.ReplyPump, the reply pump under reach.invoke's blocking wait and the gateway's reader thread: every
receipt reaches its waiter or waits (bounded) for one; bad records are skipped; a broken reader says so. Run on an
in-memory reply topic (the pump's `take` seam), no broker."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Sequence
from typing import Any

import pytest

from reach.kafka import codec
from reach.records import Receipt, Status
from reach.replyhub import _Waiter
from reach.replypump import Record, ReplyPump


class Msg:
    """A consumed record as confluent_kafka hands it over."""

    def __init__(self, value: bytes | None, error: str | None = None) -> None:
        self._value, self._error = value, error

    def error(self) -> Any:
        return self._error

    def value(self) -> Any:
        return self._value


class Topic:
    """A reply topic read in batches: each `take` returns the next batch queued, else nothing."""

    def __init__(self, *batches: list[Msg]) -> None:
        self.batches = list(batches)
        self.reads = 0
        self.broken: Exception | None = None
        self._lock = threading.Lock()

    def take(self, max_records: int, timeout_s: float) -> Sequence[Record]:
        if self.broken:
            raise self.broken
        with self._lock:
            self.reads += 1
            return self.batches.pop(0)[:max_records] if self.batches else []


def receipt(mid: str, status: Status = Status.COMPLETED, generation: int = 0) -> Receipt:
    return Receipt(message_id=mid, trace_id="t", tenant="d", capability="c", status=status, at=1,
                   generation=generation)


def msg(mid: str, status: Status = Status.COMPLETED, generation: int = 0) -> Msg:
    return Msg(codec.encode(receipt(mid, status, generation)))


def test_a_read_receipt_goes_to_its_waiter_and_is_not_kept() -> None:
    topic = Topic([msg("a")])
    pump, got = ReplyPump(topic.take), []
    pump.expect(("a", 0), got.append)
    assert pump.pump(10, 0.0) == 1
    assert [r.message_id for r in got] == ["a"]
    assert pump.claim(("a", 0)) is None and len(pump.arrived) == 0


def test_a_receipt_read_before_its_waiter_registers_is_handed_over_at_registration() -> None:
    pump, got = ReplyPump(Topic([msg("a"), msg("a", Status.FAILED)]).take), []
    pump.pump(10, 0.0)
    pump.expect(("a", 0), got.append)
    assert [(r.message_id, r.status) for r in got] == [("a", Status.COMPLETED)], "the first receipt, once"


def test_error_empty_and_undecodable_records_are_skipped_and_the_rest_still_delivered() -> None:
    topic = Topic([Msg(None, error="_PARTITION_EOF"), Msg(None), Msg(b"\x00not avro"), Msg(b""), msg("a")])
    pump, got = ReplyPump(topic.take), []
    pump.expect(("a", 0), got.append)
    assert pump.pump(10, 0.0) == 1
    assert [r.message_id for r in got] == ["a"]


def test_generations_are_separate_waits() -> None:
    pump, got = ReplyPump(Topic([msg("a", generation=1), msg("a", generation=0)]).take), []
    pump.expect(("a", 1), got.append)
    pump.pump(10, 0.0)
    assert [r.generation for r in got] == [1]
    found = pump.claim(("a", 0))
    assert found is not None and found.generation == 0


def test_a_forgotten_waiter_leaves_its_receipt_to_be_claimed_and_a_stale_forget_removes_no_one() -> None:
    pump, first, second = ReplyPump(Topic([msg("a")], [msg("b")]).take), [], []
    forgotten, kept = first.append, second.append
    pump.expect(("a", 0), forgotten)
    pump.forget(("a", 0), forgotten)
    pump.pump(10, 0.0)
    assert first == [] and pump.claim(("a", 0)) is not None
    pump.expect(("b", 0), kept)
    pump.forget(("b", 0), forgotten)  # an earlier waiter of another request going away late
    pump.pump(10, 0.0)
    assert [r.message_id for r in second] == ["b"]


def test_unclaimed_receipts_are_bounded() -> None:
    pump = ReplyPump(Topic([msg(f"m{i}") for i in range(10)]).take, limit=3)
    pump.pump(100, 0.0)
    assert len(pump.arrived) == 3 and pump.arrived.dropped == 7


def test_wait_reads_until_its_receipt_comes_and_keeps_the_others() -> None:
    topic = Topic([], [msg("other")], [msg("a")])
    pump = ReplyPump(topic.take)
    found = pump.wait(("a", 0), 5.0)
    assert found is not None and found.message_id == "a" and topic.reads == 3
    assert pump.claim(("other", 0)) is not None


def test_wait_gives_up_at_its_timeout() -> None:
    topic = Topic()
    assert ReplyPump(topic.take).wait(("a", 0), 0.0) is None
    assert topic.reads == 0, "no time left: no read"


def test_a_broken_reader_raises_from_pump_and_wait() -> None:
    topic = Topic()
    topic.broken = RuntimeError("consumer closed")
    pump = ReplyPump(topic.take)
    with pytest.raises(RuntimeError, match="consumer closed"):
        pump.pump(10, 0.0)
    with pytest.raises(RuntimeError, match="consumer closed"):
        pump.wait(("a", 0), 5.0)


def test_a_waiter_that_cannot_take_its_receipt_stops_the_pump() -> None:
    def closed_loop(_: Receipt) -> None:
        raise RuntimeError("Event loop is closed")

    pump = ReplyPump(Topic([msg("a")]).take)
    pump.expect(("a", 0), closed_loop)
    with pytest.raises(RuntimeError, match="Event loop is closed"):
        pump.pump(10, 0.0)


def test_two_threads_waiting_each_get_their_own_receipt() -> None:
    pump = ReplyPump(Topic([msg("b")], [], [msg("a")]).take)
    found: dict[str, Receipt | None] = {}

    def wait(mid: str) -> None:
        found[mid] = pump.wait((mid, 0), 5.0)

    threads = [threading.Thread(target=wait, args=(mid,)) for mid in ("a", "b")]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=10)
    assert {mid: r.message_id if r else None for mid, r in found.items()} == {"a": "a", "b": "b"}


def test_the_gateways_waiter_is_resolved_on_its_loop_from_the_reader_thread() -> None:
    topic = Topic()
    pump = ReplyPump(topic.take)

    async def request() -> tuple[Receipt | None, Receipt | None]:
        waiter = _Waiter(pump, ("a", 0))
        pump.expect(("a", 0), waiter)
        topic.batches.append([msg("a")])
        reader = threading.Thread(target=pump.pump, args=(10, 0.0))
        reader.start()
        got = await waiter.result(5.0)
        reader.join(timeout=5)
        late = _Waiter(pump, ("b", 0))
        pump.expect(("b", 0), late)
        return got, await late.result(0.01)

    got, late = asyncio.run(request())
    assert got is not None and got.message_id == "a"
    assert late is None, "no receipt: None after the timeout"
    topic.batches.append([msg("b")])
    pump.pump(10, 0.0)
    assert pump.claim(("b", 0)) is not None, "a waiter that timed out is forgotten: its late receipt is kept"


class Marked(Msg):
    """A reply the status fold marked: its ending went on to the fallback child `child`."""

    def __init__(self, value: bytes, child: str) -> None:
        super().__init__(value)
        self._headers = [("x-reach-fallback", f"demo.echo {child}".encode())]

    def headers(self) -> Any:
        return self._headers


def test_a_reply_naming_its_fallback_child_is_followed_to_the_childs_ending() -> None:
    topic = Topic([Marked(codec.encode(receipt("a", Status.UNROUTABLE)), "a-fb0")], [msg("a-fb0")])
    pump = ReplyPump(topic.take)

    async def request() -> tuple[Receipt | None, list[Receipt]]:
        waiter = _Waiter(pump, ("a", 0))
        pump.expect(("a", 0), waiter)
        reader = threading.Thread(target=lambda: [pump.pump(10, 0.0) for _ in range(2)])
        reader.start()
        got = await waiter.result(5.0)
        reader.join(timeout=5)
        return got, waiter.endings

    got, endings = asyncio.run(request())
    assert got is not None and (got.message_id, got.status) == ("a-fb0", Status.COMPLETED)
    assert [(r.message_id, r.status) for r in endings] == [("a", Status.UNROUTABLE), ("a-fb0", Status.COMPLETED)]


def test_a_fallback_mark_that_names_no_child_of_the_message_is_not_followed() -> None:
    for forged in ("other-fb0", "a-fbx", "a-fb0-fb0", ""):
        topic = Topic([Marked(codec.encode(receipt("a", Status.FAILED)), forged)])
        pump = ReplyPump(topic.take)
        found = pump.wait(("a", 0), 1.0)
        assert found is not None and found.status is Status.FAILED
        assert pump.child_of(("a", 0)) is None, forged


def test_a_child_that_does_not_end_in_time_leaves_the_first_ending_and_no_result() -> None:
    topic = Topic([Marked(codec.encode(receipt("a", Status.UNROUTABLE)), "a-fb0")])
    pump = ReplyPump(topic.take)

    async def request() -> tuple[Receipt | None, list[Receipt], str]:
        waiter = _Waiter(pump, ("a", 0))
        pump.expect(("a", 0), waiter)
        pump.pump(10, 0.0)
        return await waiter.result(0.2), waiter.endings, waiter.waiting_for

    got, endings, waiting_for = asyncio.run(request())
    assert got is None and [r.status for r in endings] == [Status.UNROUTABLE] and waiting_for == "a-fb0"
