"""An envelope the router cannot decode asks the first-terminal register before it ends the message REJECTED
(docs/decisions/0048): a message that already ended is not ended again."""

from __future__ import annotations

from typing import Any, cast

import pytest

from reach.envelopes import new_envelope
from reach.kafka import codec
from reach.kafka import headers as h
from reach.records import DeadLetter, Status
from reach.terminals import Fence, MemorySlots
from tests.unit.streams.kafka_fakes import FakeMessage, FakeProducer, settle
from tests.unit.streams.test_router import CAP, NAMES, router
from tests.unit.streams.test_router_fence import completed, fenced, receipts

NEWER = codec.MARKER + bytes(8) + b"\x02body of a schema this router does not know"


def newer_envelope(message_id: str, offset: int = 0) -> FakeMessage:
    return FakeMessage(CAP, 0, offset, NEWER, message_id.encode(), [(h.MESSAGE_ID, message_id.encode())])


def test_an_undecodable_envelope_of_an_ended_message_is_not_ended_again(monkeypatch: pytest.MonkeyPatch) -> None:
    r, slots = fenced(monkeypatch)
    envelope = new_envelope("demo.echo", {"n": 1})
    slots.values[envelope.message_id, 0] = completed(envelope)  # a newer router's stack COMPLETED it
    producer = FakeProducer()
    acks = settle(r, cast(Any, [newer_envelope(envelope.message_id)]), cast(Any, producer))
    assert producer.to(NAMES.receipts) == [], "no REJECTED after COMPLETED"
    assert producer.to(NAMES.dlq) == [], "no dead letter for a finished message"
    assert acks.commits() == {(CAP, 0): 1}, "the record is done: its partition moves on"
    totals = r.stats.snapshot().totals
    assert totals["superseded"] == 1 and totals.get("rejected", 0) == 0


def test_an_undecodable_envelope_of_an_open_message_is_rejected_and_dead_lettered(
        monkeypatch: pytest.MonkeyPatch) -> None:
    r, _ = fenced(monkeypatch)
    producer = FakeProducer()
    settle(r, cast(Any, [newer_envelope("m-open")]), cast(Any, producer))
    [rejected] = receipts(producer)
    assert rejected.status is Status.REJECTED and rejected.message_id == "m-open"
    assert rejected.error is not None and rejected.error.code == "UNKNOWN_SCHEMA"
    [letter] = [codec.decode(v, DeadLetter) for v in producer.to(NAMES.dlq)]
    assert letter.envelope == NEWER and letter.reason == "UNKNOWN_SCHEMA"


def test_without_the_register_an_undecodable_envelope_is_rejected(monkeypatch: pytest.MonkeyPatch) -> None:
    slots = MemorySlots()
    slots.down = True
    r = router(monkeypatch)
    r.fence = Fence(slots, writer="router")
    producer = FakeProducer()
    settle(r, cast(Any, [newer_envelope("m-1")]), cast(Any, producer))
    assert [x.status for x in receipts(producer)] == [Status.REJECTED], "availability first, as for every ending"
