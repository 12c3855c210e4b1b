"""The timekeeper's I/O on in-memory fakes: nothing is marked done that the broker did not acknowledge, and an
envelope is gone only when its offset is below the log start."""

from __future__ import annotations

from typing import Any, cast

import pytest
from confluent_kafka import KafkaError, KafkaException

from reach.core.lifecycle import StatusRow, fold
from reach.envelopes import new_envelope
from reach.kafka import codec, topicreader
from reach.kafka import headers as H
from reach.names import Names
from reach.records import DeadLetter, Decision, Receipt, Status
from reach.settings import KafkaSettings, RedisSettings
from reach.streams.timekeeper.sweep import Timekeeper
from reach.terminals import Fence, MemorySlots
from tests.unit.streams.kafka_fakes import FakeMessage, FakeProducer, FakeReader

NAMES = Names("ns")
INBOX = NAMES.inbox("agent://a/b")
# a budget far in the future: the decision reads the real clock, and CI runs these minutes after import
ENVELOPE = new_envelope("demo.echo", {"x": 1}, delivery_timeout_ms=1_000).model_copy(update={"deadline": 10**13})


def routed_row(deadline: int = 10**13) -> StatusRow:
    row = fold(None, Receipt(message_id=ENVELOPE.message_id, trace_id="t", tenant="d", capability="demo.echo",
                             status=Status.ROUTED, at=100, deadline=deadline, delivery_timeout_ms=1_000,
                             instance_id="i1", decision=Decision(topic=INBOX, partition=0, offset=5)))
    assert row is not None
    return row


def keeper(monkeypatch: pytest.MonkeyPatch, reader: FakeReader, producer: FakeProducer) -> Timekeeper:
    monkeypatch.setattr(topicreader, "open_reader", lambda *_a, **_k: reader)  # the inbox read (read_one)
    tk = Timekeeper(names=NAMES, tiers=["1s"], kafka=KafkaSettings(), redis=RedisSettings(),
                    fence=Fence(MemorySlots(), writer="timekeeper"))
    tk._producer = cast(Any, producer)
    return tk


def statuses(producer: FakeProducer) -> list[Status]:
    return [codec.decode(v, Receipt).status for v in producer.to(NAMES.receipts)]


def test_a_reroute_still_queued_after_the_flush_is_not_marked_done(monkeypatch: pytest.MonkeyPatch) -> None:
    held = True
    producer = FakeProducer(hold=lambda _topic: held)
    inbox = [FakeMessage(INBOX, 0, 5, codec.encode(ENVELOPE))]
    tk = keeper(monkeypatch, FakeReader(inbox), producer)
    assert tk.tick([routed_row()], now=5_000) == 0, "nothing acknowledged: not done"
    held = False
    tk._fetch = lambda _inbox: codec.encode(ENVELOPE)  # type: ignore[method-assign]
    assert tk.tick([routed_row()], now=5_000) == 1, "acted on again, then marked"
    assert tk.tick([routed_row()], now=5_000) == 0


def test_a_refused_expiry_is_acted_on_again(monkeypatch: pytest.MonkeyPatch) -> None:
    refuse = True
    producer = FakeProducer(refuse=lambda _t, _v: KafkaError(KafkaError._MSG_TIMED_OUT) if refuse else None)
    tk = keeper(monkeypatch, FakeReader([]), producer)
    assert tk.tick([routed_row(deadline=1_000)], now=5_000) == 0
    refuse = False
    assert tk.tick([routed_row(deadline=1_000)], now=5_000) == 1
    assert statuses(producer) == [Status.EXPIRED]


def test_an_unread_envelope_above_the_log_start_is_retried_not_gone(monkeypatch: pytest.MonkeyPatch) -> None:
    producer = FakeProducer()
    tk = keeper(monkeypatch, FakeReader([], low=0, high=10), producer)
    assert tk.tick([routed_row()], now=5_000) == 0
    assert producer.sent == [], "no FAILED / ENVELOPE_GONE on a transient miss"
    moving = KafkaException(KafkaError(KafkaError.NOT_LEADER_FOR_PARTITION))
    tk2 = keeper(monkeypatch, FakeReader([], watermark_error=moving), producer)
    assert tk2.tick([routed_row()], now=5_000) == 0 and producer.sent == []


def test_an_offset_at_or_past_a_lagging_high_watermark_is_retried_not_gone(monkeypatch: pytest.MonkeyPatch) -> None:
    producer = FakeProducer()
    for high in (5, 3):  # the row's offset is 5: a new leader whose high watermark has not caught up yet
        tk = keeper(monkeypatch, FakeReader([], low=0, high=high), producer)
        assert tk.tick([routed_row()], now=5_000) == 0
    assert producer.sent == [], "no FAILED / ENVELOPE_GONE while the offset may still appear"
    inbox = [FakeMessage(INBOX, 0, 5, codec.encode(ENVELOPE))]
    caught_up = keeper(monkeypatch, FakeReader(inbox, low=0, high=6), producer)
    assert caught_up.tick([routed_row()], now=5_000) == 1
    assert Status.FAILED not in statuses(producer)


def test_an_envelope_below_the_log_start_is_gone(monkeypatch: pytest.MonkeyPatch) -> None:
    producer = FakeProducer()
    tk = keeper(monkeypatch, FakeReader([], low=6, high=10), producer)
    assert tk.tick([routed_row()], now=5_000) == 1
    [receipt] = [codec.decode(v, Receipt) for v in producer.to(NAMES.receipts)]
    assert receipt.status is Status.FAILED and receipt.error and receipt.error.code == "ENVELOPE_GONE"


def test_a_reroute_receipt_waits_for_its_record(monkeypatch: pytest.MonkeyPatch) -> None:
    cap = NAMES.capability("demo.echo")
    down = True
    producer = FakeProducer(refuse=lambda topic, _v: KafkaError(KafkaError._MSG_TIMED_OUT) if down and topic == cap
                            else None)
    inbox = [FakeMessage(INBOX, 0, 5, codec.encode(ENVELOPE))]
    tk = keeper(monkeypatch, FakeReader(list(inbox)), producer)
    assert tk.tick([routed_row()], now=5_000) == 0
    assert producer.to(NAMES.receipts) == [], "no ACCEPTED receipt for a reroute the broker did not take"
    down = False
    tk = keeper(monkeypatch, FakeReader(list(inbox)), producer)
    assert tk.tick([routed_row()], now=5_000) == 1
    assert [t for t, _v, _k in producer.sent] == [cap, NAMES.receipts]
    assert statuses(producer) == [Status.ACCEPTED]


def test_a_reroute_refused_for_good_is_dead_lettered_with_its_receipt(monkeypatch: pytest.MonkeyPatch) -> None:
    cap = NAMES.capability("demo.echo")
    producer = FakeProducer(refuse=lambda topic, _v: KafkaError(KafkaError.UNKNOWN_TOPIC_OR_PART) if topic == cap
                            else None)
    tk = keeper(monkeypatch, FakeReader([FakeMessage(INBOX, 0, 5, codec.encode(ENVELOPE))]), producer)
    assert tk.tick([routed_row()], now=5_000) == 1, "acted on once, not refused every tick"
    [letter] = [codec.decode(v, DeadLetter) for v in producer.to(NAMES.dlq)]
    assert letter.reason == "REFUSED_BY_BROKER" and letter.envelope == codec.encode(ENVELOPE)
    assert (letter.origin_topic, letter.origin_offset) == (INBOX, 5)
    [receipt] = [codec.decode(v, Receipt) for v in producer.to(NAMES.receipts)]
    assert receipt.status is Status.DEAD_LETTERED and receipt.error and receipt.error.code == "REFUSED_BY_BROKER"
    assert [t for t, _v, _k in producer.sent] == [NAMES.dlq, NAMES.receipts], "the letter before its receipt"


def fenced_keeper(monkeypatch: pytest.MonkeyPatch, reader: FakeReader,
                  producer: FakeProducer) -> tuple[Timekeeper, MemorySlots]:
    tk = keeper(monkeypatch, reader, producer)
    slots = MemorySlots()
    tk.fence = Fence(slots, writer="timekeeper")
    return tk, slots


def completed_bytes() -> bytes:
    return codec.encode(Receipt(message_id=ENVELOPE.message_id, trace_id="t", tenant="d", capability="demo.echo",
                                status=Status.COMPLETED, at=200, instance_id="i1"))


def test_an_expiry_of_a_row_that_is_behind_republishes_the_first_ending(monkeypatch: pytest.MonkeyPatch) -> None:
    producer = FakeProducer()
    tk, slots = fenced_keeper(monkeypatch, FakeReader([]), producer)
    slots.values[ENVELOPE.message_id, 0] = completed_bytes()  # the agent COMPLETED it; the row still says ROUTED
    assert tk.tick([routed_row(deadline=1_000)], now=5_000) == 1
    assert producer.to(NAMES.receipts) == [completed_bytes()], "the winner's bytes, never a second terminal"
    assert tk.expired == 0 and tk.superseded == 1


def test_a_won_expiry_is_stored_before_it_is_published(monkeypatch: pytest.MonkeyPatch) -> None:
    producer = FakeProducer()
    tk, slots = fenced_keeper(monkeypatch, FakeReader([]), producer)
    assert tk.tick([routed_row(deadline=1_000)], now=5_000) == 1
    assert statuses(producer) == [Status.EXPIRED]
    assert slots.values[ENVELOPE.message_id, 0] == producer.to(NAMES.receipts)[0]


def test_a_reroute_of_a_message_that_ended_is_skipped(monkeypatch: pytest.MonkeyPatch) -> None:
    producer = FakeProducer()
    tk, slots = fenced_keeper(monkeypatch, FakeReader([FakeMessage(INBOX, 0, 5, codec.encode(ENVELOPE))]), producer)
    slots.values[ENVELOPE.message_id, 0] = completed_bytes()
    assert tk.tick([routed_row()], now=5_000) == 1
    assert producer.to(NAMES.receipts) == [completed_bytes()], "the ending again (a late terminal, identical)"
    assert [t for t, _v, _k in producer.sent] == [NAMES.receipts], "no ACCEPTED(DELIVERY_TIMEOUT), no second forward"
    assert tk.skipped == 1
    assert tk.tick([routed_row()], now=5_000) == 0 and slots.calls == 1, "marked: not asked again"


def test_a_skipped_reroute_is_marked_only_when_the_ending_it_republishes_is_acknowledged(
        monkeypatch: pytest.MonkeyPatch) -> None:
    down = True
    producer = FakeProducer(refuse=lambda _t, _v: KafkaError(KafkaError._MSG_TIMED_OUT) if down else None)
    tk, slots = fenced_keeper(monkeypatch, FakeReader([]), producer)
    slots.values[ENVELOPE.message_id, 0] = completed_bytes()
    assert tk.tick([routed_row()], now=5_000) == 0
    down = False
    assert tk.tick([routed_row()], now=5_000) == 1
    assert producer.to(NAMES.receipts) == [completed_bytes()]


EXHAUSTED = ENVELOPE.model_copy(update={"reroutes": 3, "attempt": 4})  # nothing left: a delivery timeout ends it


def test_a_dead_letter_whose_records_failed_is_written_on_the_next_tick(monkeypatch: pytest.MonkeyPatch) -> None:
    down = True
    producer = FakeProducer(refuse=lambda _t, _v: KafkaError(KafkaError._MSG_TIMED_OUT) if down else None)
    inbox = FakeMessage(INBOX, 0, 5, codec.encode(EXHAUSTED))
    tk, slots = fenced_keeper(monkeypatch, FakeReader([inbox]), producer)
    assert tk.tick([routed_row()], now=5_000) == 0, "nothing acknowledged"
    stored = slots.values[ENVELOPE.message_id, 0]
    assert codec.decode(stored, Receipt).status is Status.DEAD_LETTERED
    down = False
    monkeypatch.setattr(topicreader, "open_reader", lambda *_a, **_k: FakeReader([inbox]))
    assert tk.tick([routed_row()], now=5_000) == 1, "its own ending found in the slot: acted on, not skipped"
    [letter] = [codec.decode(v, DeadLetter) for v in producer.to(NAMES.dlq)]
    assert letter.reason == "RETRIES_EXHAUSTED" and letter.envelope == codec.encode(EXHAUSTED)
    assert producer.to(NAMES.receipts) == [stored], "the stored receipt, byte for byte"


def test_a_letter_refused_for_good_after_a_won_dead_letter_keeps_the_stored_receipt(
        monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(topic: str, value: bytes) -> KafkaError | None:  # the first letter is refused for good
        first = topic == NAMES.dlq and codec.decode(value, DeadLetter).reason == "RETRIES_EXHAUSTED"
        return KafkaError(KafkaError.MSG_SIZE_TOO_LARGE) if first else None

    producer = FakeProducer(refuse=refuse)
    tk, slots = fenced_keeper(monkeypatch, FakeReader([FakeMessage(INBOX, 0, 5, codec.encode(EXHAUSTED))]),
                              producer)
    assert tk.tick([routed_row()], now=5_000) == 1
    stored = slots.values[ENVELOPE.message_id, 0]
    assert producer.to(NAMES.receipts) == [stored], "one ending: the claimed one, not a second DEAD_LETTERED"
    [letter] = [codec.decode(v, DeadLetter) for v in producer.to(NAMES.dlq)]
    assert letter.reason == "REFUSED_BY_BROKER", "the refused-for-good letter is still written"


def test_a_reroute_that_ends_the_message_claims_and_a_lost_claim_writes_no_letter(
        monkeypatch: pytest.MonkeyPatch) -> None:
    exhausted = EXHAUSTED
    producer = FakeProducer()
    tk, slots = fenced_keeper(monkeypatch, FakeReader([FakeMessage(INBOX, 0, 5, codec.encode(exhausted))]),
                              producer)
    tk.fence.peek = lambda slots_: [None] * len(slots_)  # type: ignore[method-assign]  # ended after the peek
    slots.values[ENVELOPE.message_id, 0] = completed_bytes()
    assert tk.tick([routed_row()], now=5_000) == 1
    assert producer.to(NAMES.dlq) == [] and producer.to(NAMES.receipts) == [completed_bytes()]
    winner = FakeProducer()
    tk, slots = fenced_keeper(monkeypatch, FakeReader([FakeMessage(INBOX, 0, 5, codec.encode(exhausted))]), winner)
    assert tk.tick([routed_row()], now=5_000) == 1
    assert len(winner.to(NAMES.dlq)) == 1 and statuses(winner) == [Status.DEAD_LETTERED], "a won claim letters it"
    assert slots.values[ENVELOPE.message_id, 0] == winner.to(NAMES.receipts)[0]


def test_with_redis_out_the_timekeeper_still_acts(monkeypatch: pytest.MonkeyPatch) -> None:
    producer = FakeProducer()
    tk, slots = fenced_keeper(monkeypatch, FakeReader([]), producer)
    slots.down = True
    assert tk.tick([routed_row(deadline=1_000)], now=5_000) == 1
    assert statuses(producer) == [Status.EXPIRED] and tk.fence.unfenced == 1


def asks(producer: FakeProducer) -> list[bool]:
    """Per receipt produced: whether it asks the status fold for the capability's fallback."""
    return [any(k == H.FALLBACK_ASK and v == b"timekeeper" for k, v in hdrs or ())
            for topic, hdrs in producer.sent_headers if topic == NAMES.receipts]


def test_a_delivery_timeout_that_exhausts_the_retries_asks_for_the_fallback_only_when_it_won(
        monkeypatch: pytest.MonkeyPatch) -> None:
    won = FakeProducer()
    tk, _ = fenced_keeper(monkeypatch, FakeReader([FakeMessage(INBOX, 0, 5, codec.encode(EXHAUSTED))]), won)
    assert tk.tick([routed_row()], now=5_000) == 1
    assert statuses(won) == [Status.DEAD_LETTERED] and asks(won) == [True]
    lost = FakeProducer()
    tk, slots = fenced_keeper(monkeypatch, FakeReader([FakeMessage(INBOX, 0, 5, codec.encode(EXHAUSTED))]), lost)
    tk.fence.peek = lambda slots_: [None] * len(slots_)  # type: ignore[method-assign]  # ended after the peek
    slots.values[ENVELOPE.message_id, 0] = completed_bytes()
    assert tk.tick([routed_row()], now=5_000) == 1
    assert asks(lost) == [False], "the agent's COMPLETED republished: not the timekeeper's ending to send on"


def test_an_expiry_and_a_refused_reroute_ask_for_no_fallback(monkeypatch: pytest.MonkeyPatch) -> None:
    producer = FakeProducer()
    tk = keeper(monkeypatch, FakeReader([]), producer)
    assert tk.tick([routed_row(deadline=1_000)], now=5_000) == 1
    cap = NAMES.capability("demo.echo")
    refusing = FakeProducer(refuse=lambda topic, _v: KafkaError(KafkaError.MSG_SIZE_TOO_LARGE) if topic == cap
                            else None)
    tk = keeper(monkeypatch, FakeReader([FakeMessage(INBOX, 0, 5, codec.encode(ENVELOPE))]), refusing)
    assert tk.tick([routed_row()], now=5_000) == 1
    assert statuses(producer) == [Status.EXPIRED] and statuses(refusing) == [Status.DEAD_LETTERED]
    assert asks(producer) == [False] and asks(refusing) == [False], "a child of a refused record is refused too"
