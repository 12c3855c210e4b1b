"""What the usage counter charges for a receipt, and a batch counted once however often it is read."""

from __future__ import annotations

import asyncio
import time
import uuid
from typing import Any
from unittest import mock

import pytest

from reach.core.spend import Period, Spent
from reach.kafka import clients, codec, memory
from reach.kafka import headers as H
from reach.names import Names
from reach.records import Receipt, Status, Usage
from reach.settings import KafkaSettings
from reach.spendbook import MemorySpendBook
from reach.streams.status.lookup import partition_of
from reach.streams.usage import counter as counter_module
from reach.streams.usage.counter import UsageCounter, batch_charges, charges, usage_group, with_usage

AT = 1_796_292_000_000


def receipt(mid: str, status: Status = Status.COMPLETED, *, usage: Usage | None = None, gen: int = 0) -> Receipt:
    return Receipt(message_id=mid, generation=gen, trace_id="t", tenant="acme", capability="demo.llm",
                   status=status, at=AT, usage=usage)


USED = Usage(input_tokens=100, output_tokens=50, model="m", cost_micros=2_000, currency="USD",
             source="gateway:app_1")


def test_a_terminal_receipt_with_usage_charges_its_tenant_and_app() -> None:
    found = charges(receipt("m1", usage=USED), currency="USD")
    assert [(c.scope, c.tokens, c.cost_micros, c.at_ms) for c in found] == [
        ("tenant:acme", 150, 2_000, AT), ("app:app_1", 150, 2_000, AT)]


def test_nothing_is_charged_without_usage_or_before_the_end() -> None:
    assert charges(receipt("m1"), currency="USD") == []
    assert charges(receipt("m1", Status.STARTED, usage=USED), currency="USD") == []
    assert charges(receipt("m1", usage=Usage()), currency="USD") == []  # all zero


def test_every_turn_of_a_conversation_is_charged_once_per_generation() -> None:
    # a turn that asks (INPUT_REQUIRED) ran the handler: charged like an ending, per generation (review finding:
    # a conversation used to be charged only for its last turn, slipping past spend limits)
    asked = charges(receipt("m1", Status.INPUT_REQUIRED, usage=USED, gen=0), currency="USD")
    last = charges(receipt("m1", Status.COMPLETED, usage=USED, gen=1), currency="USD")
    assert [(c.scope, c.generation, c.tokens) for c in asked + last] == [
        ("tenant:acme", 0, 150), ("app:app_1", 0, 150), ("tenant:acme", 1, 150), ("app:app_1", 1, 150)]


def test_a_request_sent_to_kafka_directly_charges_its_tenant_only() -> None:
    direct = USED.model_copy(update={"source": "billing-batch"})
    assert [c.scope for c in charges(receipt("m1", usage=direct), currency="USD")] == ["tenant:acme"]


def test_a_cost_in_another_currency_is_not_counted_its_tokens_are() -> None:
    [tenant, _app] = charges(receipt("m1", usage=USED.model_copy(update={"currency": "JPY"})), currency="USD")
    assert (tenant.tokens, tenant.cost_micros) == (150, 0)


def test_a_batch_read_twice_counts_once() -> None:
    batch = [receipt("m1", Status.STARTED), receipt("m1", usage=USED), None, receipt("m1", usage=USED)]  # republished
    book = MemorySpendBook()
    assert book.record(batch_charges(batch, currency="USD")) == 2  # tenant and app, once each
    assert book.record(batch_charges(batch, currency="USD")) == 0  # a restart before the commit
    assert asyncio.run(book.spent("app:app_1", [Period.DAY], AT)) == {Period.DAY: Spent(150, 2_000)}


def test_a_receipt_with_negative_amounts_never_lowers_a_spend() -> None:
    """Issue 37, finding 8: a receipt produced straight to Kafka with negative usage lowered its tenant's spend."""
    negative = USED.model_copy(update={"input_tokens": -1_000_000, "output_tokens": 0, "cost_micros": -5_000_000})
    assert charges(receipt("m1", usage=negative), currency="USD") == []
    cheaper = USED.model_copy(update={"cost_micros": -5_000_000})  # tokens charged, the cost would lower the spend
    assert [(c.tokens, c.cost_micros) for c in charges(receipt("m2", usage=cheaper), currency="USD")] == [
        (150, 0), (150, 0)]


class Book(MemorySpendBook):
    def close(self) -> None:
        pass


def test_the_counter_decodes_only_receipts_that_can_charge_and_commits_past_every_record() -> None:
    """On the memory bus: a STARTED with its status header and a router's ROUTED are not decoded, an undecodable
    receipt is skipped, a republished terminal is charged once, and every offset is committed."""
    name = f"usage-{uuid.uuid4().hex[:8]}"
    kafka = KafkaSettings(bootstrap=memory.SCHEME + name)
    names = Names("ns")
    bus = memory.bus(name)
    bus.create_topic(names.receipts, 2)
    decoded: list[bytes] = []
    real = counter_module.decode_receipt

    def counting(data: bytes) -> Any:
        decoded.append(data)
        return real(data)

    producer = clients.producer(kafka)
    sent: list[tuple[bytes, H.Headers | None]] = [
        (codec.encode(receipt("m1", Status.STARTED)), [H.status_header("STARTED")]),
        (codec.encode(receipt("m1", Status.ROUTED)), [(H.ROUTER, b"r1")]),
        (b"not a receipt", None),
        (codec.encode(receipt("m1", usage=USED)), [H.status_header("COMPLETED")]),
        (codec.encode(receipt("m1", usage=USED)), None),  # an older producer: no header, decoded
    ]
    for value, headers in sent:
        producer.produce(names.receipts, value=value, key=b"m1", headers=headers)
    producer.flush(1)
    book = Book()
    counter = UsageCounter(names=names, kafka=kafka, book=lambda: book, currency="USD")
    try:
        with mock.patch.object(counter_module, "decode_receipt", counting), counter:
            deadline = time.monotonic() + 5
            part = partition_of("m1", 2)
            while bus.committed(usage_group(names), (names.receipts, part)) != 5:
                assert time.monotonic() < deadline, "every offset committed"
                time.sleep(0.01)
    finally:
        memory.forget(name)
    assert counter.counted == 2
    assert decoded == [b"not a receipt", sent[3][0], sent[4][0]], "the STARTED and the ROUTED were not decoded"


def test_only_a_receipt_that_carries_usage_becomes_a_model() -> None:
    """The counter reads every receipt that may charge with the generated reader; a model is made only for one with
    usage (a no-op agent's COMPLETED charges nothing and is let go as None); bad bytes are a DecodeError."""
    assert with_usage(codec.encode(receipt("m1"))) is None
    made = with_usage(codec.encode(receipt("m1", usage=USED)))
    assert made == receipt("m1", usage=USED)
    with pytest.raises(codec.DecodeError):
        with_usage(b"not a receipt")
