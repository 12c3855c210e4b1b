"""What the usage counter charges for a receipt, and a batch counted once however often it is read."""

from __future__ import annotations

import asyncio

from reach.core.spend import Period, Spent
from reach.kafka import codec
from reach.records import Receipt, Status, Usage
from reach.spendbook import MemorySpendBook
from reach.streams.usage.counter import batch_charges, charges
from tests.unit.streams.kafka_fakes import FakeMessage

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


def test_a_batch_read_twice_counts_once_and_commits_past_every_record() -> None:
    def msg(offset: int, value: bytes) -> FakeMessage:
        return FakeMessage("ns.receipts", 0, offset, value)

    batch = [msg(0, codec.encode(receipt("m1", Status.STARTED))), msg(1, codec.encode(receipt("m1", usage=USED))),
             msg(2, b"not a receipt"), msg(3, codec.encode(receipt("m1", usage=USED)))]  # republished terminal
    found, commits = batch_charges(batch, currency="USD")  # type: ignore[arg-type]
    assert commits == {("ns.receipts", 0): 4}
    book = MemorySpendBook()
    assert book.record(found) == 2  # tenant and app, once each
    again, _ = batch_charges(batch, currency="USD")  # type: ignore[arg-type]  # a restart before the commit
    assert book.record(again) == 0
    assert asyncio.run(book.spent("app:app_1", [Period.DAY], AT)) == {Period.DAY: Spent(150, 2_000)}


def test_a_receipt_with_negative_amounts_never_lowers_a_spend() -> None:
    """Issue 37, finding 8: a receipt produced straight to Kafka with negative usage lowered its tenant's spend."""
    negative = USED.model_copy(update={"input_tokens": -1_000_000, "output_tokens": 0, "cost_micros": -5_000_000})
    assert charges(receipt("m1", usage=negative), currency="USD") == []
    cheaper = USED.model_copy(update={"cost_micros": -5_000_000})  # tokens charged, the cost would lower the spend
    assert [(c.tokens, c.cost_micros) for c in charges(receipt("m2", usage=cheaper), currency="USD")] == [
        (150, 0), (150, 0)]
