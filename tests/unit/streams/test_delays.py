"""The delay forwarder's batches on in-memory fakes (reach.kafka.worker's `process` seam): bad records are
dead-lettered, unacked ones never committed and read again."""

from __future__ import annotations

from typing import Any, cast

import pytest
from confluent_kafka import KafkaError

from reach.envelopes import new_envelope
from reach.kafka import codec, headers
from reach.kafka.codec import RegistryUnavailable
from reach.names import Names
from reach.records import DeadLetter, Receipt, Status
from reach.settings import KafkaSettings, RedisSettings
from reach.streams.delays.forwarder import Bad, DelayForwarder, Hold, Send, next_step
from reach.terminals import Fence, MemorySlots
from tests.unit.streams.kafka_fakes import FakeConsumer, FakeMessage, FakeProducer

NAMES = Names("ns")
TIER = NAMES.retry("1s")
CAP = NAMES.capability("demo.echo")
NOW = 1_000_000


def record(offset: int, *, due: bytes | None = b"0", target: bytes | None = None, value: bytes | None = None,
           partition: int = 0) -> FakeMessage:
    hdrs = [(k, v) for k, v in ((headers.DUE_AT, due), (headers.TARGET, target)) if v is not None]
    body = value if value is not None else codec.encode(new_envelope("demo.echo", {"n": offset}))
    return FakeMessage(TIER, partition, offset, body, b"k", hdrs)  # type: ignore[arg-type]


def run(batch: list[FakeMessage], producer: FakeProducer,
        slots: MemorySlots | None = None) -> tuple[DelayForwarder, FakeConsumer, dict[tuple[str, int], int]]:
    """One batch through the forwarder; the commit points it reached."""
    fwd = DelayForwarder(names=NAMES, tiers=["1s"], kafka=KafkaSettings(), redis=RedisSettings(), clock=lambda: NOW,
                         fence=Fence(slots or MemorySlots(), writer="delay tiers"))
    consumer = FakeConsumer()
    commits = fwd.process(cast(Any, batch), consumer=cast(Any, consumer), producer=cast(Any, producer))
    return fwd, consumer, commits


@pytest.mark.parametrize(("hdrs", "code"), [
    ([(headers.DUE_AT, b"soon")], "BAD_DUE_AT"),
    ([(headers.TARGET, b"\xff\xfe")], "BAD_TARGET"),
    ([(headers.TARGET, b"ns.control")], "BAD_TARGET"),
    ([(headers.TARGET, b"other.cap.demo.echo")], "BAD_TARGET"),
])
def test_bad_headers_are_named(hdrs: headers.Headers, code: str) -> None:
    step = next_step(hdrs, codec.encode(new_envelope("demo.echo", {})), NAMES, NOW)
    assert isinstance(step, Bad) and step.code == code


def test_due_and_target_decide_hold_or_send() -> None:
    value = codec.encode(new_envelope("demo.echo", {}))
    assert next_step([(headers.DUE_AT, str(NOW + 5).encode())], value, NAMES, NOW) == Hold(NOW + 5)
    assert next_step([], value, NAMES, NOW) == Send(CAP)
    assert next_step([(headers.TARGET, CAP.encode())], b"opaque", NAMES, NOW) == Send(CAP)


def test_a_bad_record_is_dead_lettered_and_the_batch_moves_on() -> None:
    producer = FakeProducer()
    batch = [record(0), record(1, due=b"not-a-number"), record(2, target=b"ns.control"), record(3)]
    fwd, _, commits = run(batch, producer)
    assert commits == {(TIER, 0): 4}
    assert len(producer.to(CAP)) == 2 and producer.to(NAMES.control) == []
    letters = [codec.decode(v, DeadLetter) for v in producer.to(NAMES.dlq)]
    assert [(d.origin_offset, d.error.code if d.error else None) for d in letters] == [(1, "BAD_DUE_AT"),
                                                                                      (2, "BAD_TARGET")]
    assert letters[0].envelope == batch[1].value(), "the original bytes, untouched"
    receipts = [codec.decode(v, Receipt) for v in producer.to(NAMES.receipts)]
    assert {r.status for r in receipts} == {Status.DEAD_LETTERED} and len(receipts) == 2
    assert fwd.dead_lettered == 2


def test_what_the_flush_leaves_queued_is_not_committed() -> None:
    producer = FakeProducer(hold=lambda topic: topic == CAP)
    _, consumer, commits = run([record(0), record(0, partition=1)], producer)
    assert commits == {} and {(s.partition, s.offset) for s in consumer.seeks} == {(0, 0), (1, 0)}


def test_an_outage_on_one_record_commits_the_records_before_it() -> None:
    second = record(1)
    producer = FakeProducer(refuse=lambda topic, value: KafkaError(KafkaError._MSG_TIMED_OUT)
                            if value == second.value() else None)
    _, consumer, commits = run([record(0), second, record(2)], producer)
    assert commits == {(TIER, 0): 1}
    assert [(s.partition, s.offset) for s in consumer.seeks] == [(0, 1)]


def test_a_forward_the_broker_refuses_for_good_is_dead_lettered() -> None:
    big = record(0)
    producer = FakeProducer(refuse=lambda topic, value: KafkaError(KafkaError.MSG_SIZE_TOO_LARGE)
                            if topic == CAP else None)
    _, _, commits = run([big, record(1)], producer)
    assert commits == {(TIER, 0): 2}
    letters = [codec.decode(v, DeadLetter) for v in producer.to(NAMES.dlq)]
    assert [d.error.code for d in letters if d.error] == ["FORWARD_REFUSED", "FORWARD_REFUSED"]


def test_a_synchronous_produce_error_fails_only_its_record() -> None:
    first = record(0)
    producer = FakeProducer(raise_on=lambda topic, value: BufferError("full")
                            if value == first.value() and topic == CAP else None)
    _, consumer, commits = run([first, record(0, partition=1)], producer)
    assert commits == {(TIER, 1): 1} and [(s.partition, s.offset) for s in consumer.seeks] == [(0, 0)]


def test_a_registry_outage_restarts_the_loop_instead_of_dead_lettering(monkeypatch: pytest.MonkeyPatch) -> None:
    from reach.streams.delays import forwarder as delays

    def down(_value: bytes, _model: object) -> object:
        raise RegistryUnavailable("the registry did not answer")

    monkeypatch.setattr(delays.codec, "decode", down)
    producer = FakeProducer()
    with pytest.raises(RegistryUnavailable):  # infrastructure: the worker restarts from the last commit
        run([record(0), record(1)], producer)
    assert producer.sent == []


def test_a_target_that_does_not_exist_is_dead_lettered() -> None:
    producer = FakeProducer(refuse=lambda topic, _v: KafkaError(KafkaError.UNKNOWN_TOPIC_OR_PART)
                            if topic == CAP else None)
    _, _, commits = run([record(0)], producer)
    [letter] = [codec.decode(v, DeadLetter) for v in producer.to(NAMES.dlq)]
    assert letter.error is not None and letter.error.code == "FORWARD_REFUSED"
    assert commits == {(TIER, 0): 1}


def test_a_bad_record_of_a_message_that_ended_is_not_dead_lettered() -> None:
    envelope = new_envelope("demo.echo", {"n": 0})
    slots = MemorySlots()
    slots.values[envelope.message_id, envelope.generation] = b"the first ending"
    producer = FakeProducer()
    run([record(0, due=b"not-a-number", value=codec.encode(envelope))], producer, slots)
    assert producer.to(NAMES.dlq) == [] and producer.to(NAMES.receipts) == [b"the first ending"]
    won = FakeProducer()
    run([record(0, due=b"not-a-number")], won, MemorySlots())
    assert len(won.to(NAMES.dlq)) == 1 and len(won.to(NAMES.receipts)) == 1


def test_a_reread_after_a_failed_flush_writes_the_letter_its_own_first_claim_decided() -> None:
    bad = record(0, due=b"not-a-number")
    slots = MemorySlots()
    down = FakeProducer(refuse=lambda _t, _v: KafkaError(KafkaError._MSG_TIMED_OUT))  # the broker is out
    _, consumer, commits = run([bad], down, slots)
    assert commits == {} and [(s.partition, s.offset) for s in consumer.seeks] == [(0, 0)], "read again"
    [stored] = slots.values.values()
    producer = FakeProducer()  # read again: the claim finds the tier's own first DEAD_LETTERED
    fwd, _, commits = run([bad], producer, slots)
    [letter] = [codec.decode(v, DeadLetter) for v in producer.to(NAMES.dlq)]
    assert letter.error is not None and letter.error.code == "BAD_DUE_AT", "its own ending's letter, written"
    assert producer.to(NAMES.receipts) == [stored], "the stored receipt, byte for byte"
    assert commits == {(TIER, 0): 1} and fwd.dead_lettered == 1


def asking(producer: FakeProducer) -> list[bytes | None]:
    """Per receipt produced: the FALLBACK_ASK header's value (the status fold sends the fallback), else None."""
    return [dict(hdrs or ()).get(headers.FALLBACK_ASK) for topic, hdrs in producer.sent_headers
            if topic == NAMES.receipts]


def test_a_dead_lettered_retry_asks_for_the_fallback_unless_the_broker_refused_it() -> None:
    producer = FakeProducer()
    run([record(0, target=b"ns.control")], producer)
    assert asking(producer) == [b"delays"], "a retry that can never run: its capability's fallback serves it"
    refusing = FakeProducer(refuse=lambda topic, _v: KafkaError(KafkaError.MSG_SIZE_TOO_LARGE) if topic == CAP
                            else None)
    run([record(0)], refusing)
    assert asking(refusing) == [None], "too large for a topic: a child of it would be refused too"


def test_a_record_not_due_holds_its_partition_and_what_follows_it() -> None:
    producer = FakeProducer()
    later = str(NOW + 5_000).encode()
    _, consumer, commits = run([record(0), record(1, due=later), record(2), record(0, partition=1)], producer)
    assert commits == {(TIER, 0): 1, (TIER, 1): 1}, "up to the held record; the other partition moves on"
    assert len(producer.to(CAP)) == 2, "record 2 waits behind its held head"
    assert [(s.partition, s.offset) for s in consumer.seeks] == [(0, 1)]
    assert [(tp.topic, tp.partition) for tp in consumer.paused] == [(TIER, 0)]
