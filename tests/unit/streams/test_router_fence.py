"""The router's terminals behind the first-terminal-wins fence (reach.terminals), on in-memory fakes."""

from __future__ import annotations

import time
from typing import Any, cast

import pytest
from confluent_kafka import KafkaError

from reach.envelopes import new_envelope, now_ms
from reach.kafka import codec
from reach.receipts import receipt_for
from reach.records import DeadLetter, Envelope, Receipt, Status, StepStatus
from reach.settings import KafkaSettings, ReachSettings, RedisSettings
from reach.streams.router.ports import NoHandoff
from reach.streams.router.route_loop import Router
from reach.streams.router.stats import OTHER
from reach.terminals import Fence, MemorySlots
from tests.unit.streams.kafka_fakes import FakeMessage, FakeProducer, settle
from tests.unit.streams.test_router import CAP, NAMES, NS, router


def fenced(monkeypatch: pytest.MonkeyPatch) -> tuple[Router, MemorySlots]:
    slots = MemorySlots()
    r = router(monkeypatch)
    r.fence = Fence(slots, writer="router")
    return r, slots


def spent(offset: int, capability: str = "demo.echo", **fields: Any) -> tuple[FakeMessage, Envelope]:
    """An envelope whose budget is spent (the router EXPIRES it) or, with `expire_at`, one nobody serves."""
    envelope = new_envelope(capability, {"n": offset}, **fields)
    if "expire_at" not in fields:
        envelope = envelope.model_copy(update={"deadline": now_ms() - 1})
    return FakeMessage(CAP, 0, offset, codec.encode(envelope), b"k", []), envelope


def completed(envelope: Envelope) -> bytes:
    return codec.encode(receipt_for(envelope, Status.COMPLETED, agent_id="agent://demo/echo", instance_id="i1",
                                    step_status=StepStatus.OK, result=b'"done"'))


def receipts(producer: FakeProducer) -> list[Receipt]:
    return [codec.decode(v, Receipt) for v in producer.to(NAMES.receipts)]


def test_the_first_terminal_wins_and_the_router_republishes_it(monkeypatch: pytest.MonkeyPatch) -> None:
    r, slots = fenced(monkeypatch)
    msg, envelope = spent(0)
    first = completed(envelope)
    slots.values[envelope.message_id, envelope.generation] = first  # an agent COMPLETED it; a re-read comes late
    producer = FakeProducer()
    acks = settle(r, cast(Any, [msg]), cast(Any, producer))
    assert producer.to(NAMES.receipts) == [first], "the winner's bytes, not a second EXPIRED"
    assert acks.commits() == {(CAP, 0): 1}
    assert r.stats.snapshot().totals["superseded"] == 1
    assert r.stats.snapshot().totals.get("expired", 0) == 0, "a lost ending is not counted as the router's"


def test_a_won_claim_publishes_and_stores_the_routers_terminal(monkeypatch: pytest.MonkeyPatch) -> None:
    r, slots = fenced(monkeypatch)
    msg, envelope = spent(0)
    producer = FakeProducer()
    settle(r, cast(Any, [msg]), cast(Any, producer))
    [expired] = receipts(producer)
    assert expired.status is Status.EXPIRED and r.stats.snapshot().totals["expired"] == 1
    assert slots.values[envelope.message_id, envelope.generation] == producer.to(NAMES.receipts)[0]
    again = FakeProducer()  # the same record read again (not committed before a crash): the same ending
    settle(r, cast(Any, [msg]), cast(Any, again))
    assert again.to(NAMES.receipts) == producer.to(NAMES.receipts)


def test_a_lost_no_route_writes_no_dead_letter(monkeypatch: pytest.MonkeyPatch) -> None:
    r, slots = fenced(monkeypatch)
    msg, envelope = spent(0, capability="demo.nobody", expire_at=now_ms() + 60_000)
    slots.values[envelope.message_id, envelope.generation] = completed(envelope)
    producer = FakeProducer()
    settle(r, cast(Any, [msg]), cast(Any, producer))
    assert producer.to(NAMES.dlq) == [], "no dead letter for a message that already COMPLETED"
    assert [x.status for x in receipts(producer)] == [Status.COMPLETED]


def test_a_won_no_route_writes_its_dead_letter_and_receipt(monkeypatch: pytest.MonkeyPatch) -> None:
    r, _ = fenced(monkeypatch)
    msg, envelope = spent(0, capability="demo.nobody", expire_at=now_ms() + 60_000)
    producer = FakeProducer()
    settle(r, cast(Any, [msg]), cast(Any, producer))
    [letter] = [codec.decode(v, DeadLetter) for v in producer.to(NAMES.dlq)]
    assert letter.message_id == envelope.message_id and letter.reason == "NO_ROUTE"
    assert [x.status for x in receipts(producer)] == [Status.DEAD_LETTERED]


def test_a_lost_rejection_writes_no_dead_letter(monkeypatch: pytest.MonkeyPatch) -> None:
    r, slots = fenced(monkeypatch)
    envelope = new_envelope("demo.echo", {"n": 1}, reply_to="elsewhere")  # BAD_REPLY_TO: REJECTED + dead letter
    slots.values[envelope.message_id, envelope.generation] = completed(envelope)
    producer = FakeProducer()
    settle(r, cast(Any, [FakeMessage(CAP, 0, 0, codec.encode(envelope), b"k", [])]), cast(Any, producer))
    assert producer.to(NAMES.dlq) == []
    assert [x.status for x in receipts(producer)] == [Status.COMPLETED]
    totals = r.stats.snapshot().totals
    assert totals.get("rejected", 0) == 0 and totals["superseded"] == 1


def test_one_claim_per_batch_and_none_for_forwards(monkeypatch: pytest.MonkeyPatch) -> None:
    r, slots = fenced(monkeypatch)
    forwards = [FakeMessage(CAP, 0, i, codec.encode(new_envelope("demo.echo", {"n": i})), b"k", []) for i in range(3)]
    settle(r, cast(Any, forwards), cast(Any, FakeProducer()))
    assert slots.calls == 0, "the hot path's forwards never touch Redis"
    ends = [spent(i)[0] for i in range(3, 8)]
    producer = FakeProducer()
    settle(r, cast(Any, [*forwards, *ends]), cast(Any, producer))
    assert slots.calls == 1
    assert [x.status for x in receipts(producer)].count(Status.EXPIRED) == 5


def test_redis_out_publishes_the_routers_own_terminal_and_counts_it(monkeypatch: pytest.MonkeyPatch,
                                                                      caplog: pytest.LogCaptureFixture) -> None:
    r, slots = fenced(monkeypatch)
    slots.down = True
    producer = FakeProducer()
    started = time.monotonic()
    acks = settle(r, cast(Any, [spent(0)[0], spent(1)[0]]), cast(Any, producer))
    assert time.monotonic() - started < 5
    assert [x.status for x in receipts(producer)] == [Status.EXPIRED, Status.EXPIRED]
    assert acks.commits() == {(CAP, 0): 2}, "never held back by Redis"
    assert r.stats.snapshot().by_capability[OTHER]["unfenced"] == 2
    settle(r, cast(Any, [spent(2)[0]]), cast(Any, FakeProducer()))  # backing off: Redis is not asked again
    assert slots.calls == 1
    assert sum("without the first-terminal-wins fence" in m for m in caplog.messages) == 1, "logged once"


def test_without_redis_configured_the_router_still_ends_messages(monkeypatch: pytest.MonkeyPatch,
                                                                 tmp_path: Any) -> None:
    monkeypatch.setenv("REACH_NAMESPACE", NS)
    monkeypatch.delenv("REACH_REDIS_URL", raising=False)
    monkeypatch.setenv("REACH_HOME", str(tmp_path))
    r = Router(kafka=KafkaSettings(), reach=ReachSettings(), redis=RedisSettings(), handoff=NoHandoff())
    assert not r.fence.enabled
    producer = FakeProducer()
    settle(r, cast(Any, [spent(0)[0]]), cast(Any, producer))
    assert [x.status for x in receipts(producer)] == [Status.EXPIRED]


def nobody(offset: int = 0) -> tuple[FakeMessage, Envelope]:
    """An envelope nobody serves, with time left: NO_ROUTE, dead-lettered (DEAD_LETTERED receipt)."""
    return spent(offset, capability="demo.nobody", expire_at=now_ms() + 60_000)


def test_a_reread_after_a_failed_flush_writes_the_letter_its_own_first_claim_decided(
        monkeypatch: pytest.MonkeyPatch) -> None:
    r, slots = fenced(monkeypatch)
    msg, envelope = nobody()
    down = FakeProducer(refuse=lambda _t, _v: KafkaError(KafkaError._MSG_TIMED_OUT))  # the broker is out
    acks = settle(r, cast(Any, [msg]), cast(Any, down))
    assert acks.commits() == {} and down.sent == []
    stored = slots.values[envelope.message_id, envelope.generation]
    producer = FakeProducer()  # read again; its claim finds the router's own first DEAD_LETTERED (another `at`)
    acks = settle(r, cast(Any, [msg]), cast(Any, producer))
    [letter] = [codec.decode(v, DeadLetter) for v in producer.to(NAMES.dlq)]
    assert letter.reason == "NO_ROUTE" and letter.message_id == envelope.message_id, "its own ending's letter"
    assert producer.to(NAMES.receipts) == [stored], "the stored receipt, byte for byte"
    assert acks.commits() == {(CAP, 0): 1}
    assert r.stats.snapshot().totals.get("superseded", 0) == 0


def test_a_letter_refused_for_good_after_its_receipt_landed_keeps_that_receipt(
        monkeypatch: pytest.MonkeyPatch) -> None:
    r, slots = fenced(monkeypatch)
    msg, envelope = nobody()

    def refuse(topic: str, value: bytes) -> KafkaError | None:  # the copy is too large; the reference fits
        copy = topic == NAMES.dlq and codec.decode(value, DeadLetter).envelope != b""
        return KafkaError(KafkaError.MSG_SIZE_TOO_LARGE) if copy else None

    producer = FakeProducer(refuse=refuse)
    acks = settle(r, cast(Any, [msg]), cast(Any, producer))
    stored = slots.values[envelope.message_id, envelope.generation]
    assert producer.to(NAMES.receipts) == [stored, stored], "DEAD_LETTERED twice, never a REJECTED beside it"
    [letter] = [codec.decode(v, DeadLetter) for v in producer.to(NAMES.dlq)]
    assert letter.envelope == b"" and letter.origin_offset == 0, "the letter by reference is still written"
    assert acks.commits() == {(CAP, 0): 1}
    totals = r.stats.snapshot().totals
    assert totals["dead_lettered"] == 1 and totals.get("rejected", 0) == 0, "one message, counted once"
