"""The status fold collects a fan-out, on fakes: a delivery's ending (its parent learned from the router's
x-reach-fanout-of header) is produced as a FANNED_OUT receipt for the parent inside the batch, before the commit;
folded back, the last one ends the parent, and the reply and the callback go to the parent's caller once."""

from __future__ import annotations

from pathlib import Path
from typing import Any, cast

from reach.core import fanout
from reach.kafka import codec
from reach.kafka import headers as H
from reach.records import Envelope, ErrorInfo, Receipt, Status
from tests.unit.streams.kafka_fakes import FakeConsumer, FakeMessage, fold_batch
from tests.unit.streams.test_status_fold_callbacks import NAMES, OWNED, SPEC, WEBHOOK, Producer, status_fold

CAP, PARENT = "demo.order.created", "m1"
AUDIT, NOTIFY = "agent://demo/audit", "agent://demo/notify"
REPLIES = NAMES.replies("c1")


def message(offset: int, receipt: Receipt, headers: list[Any] | None = None) -> FakeMessage:
    return FakeMessage(NAMES.receipts, 0, offset, codec.encode(receipt), receipt.message_id.encode(), headers or [])


def ending(agent: str, status: Status, at: int, **kw: Any) -> list[Receipt]:
    mid = fanout.delivery_id(PARENT, 0, agent)
    return [Receipt(message_id=mid, trace_id="t1", tenant="acme", capability=CAP, status=Status.ROUTED, at=at - 5,
                    agent_id=agent, instance_id="i"),
            Receipt(message_id=mid, trace_id="t1", tenant="acme", capability=CAP, status=status, at=at,
                    agent_id=agent, instance_id="i", **kw)]


def test_the_deliveries_endings_end_the_parent_once_and_reply_to_its_caller(tmp_path: Path) -> None:
    fold, consumer, producer = status_fold(tmp_path), FakeConsumer(assigned=OWNED), Producer(known={REPLIES, WEBHOOK})
    announce = Receipt(message_id=PARENT, trace_id="t1", tenant="acme", capability=CAP, status=Status.FANNED_OUT,
                       at=1_000, delivery_timeout_ms=0, fanout=fanout.announced([AUDIT, NOTIFY], PARENT, 0),
                       callback=SPEC)
    of = [(H.FANOUT_OF, PARENT.encode())]
    audit, notify = ending(AUDIT, Status.COMPLETED, 2_000), ending(NOTIFY, Status.DEAD_LETTERED, 3_000, error=ErrorInfo(
        kind="TRANSIENT", code="RETRIES_EXHAUSTED", message="gave up"))
    batch = [message(0, announce, [(H.REPLY_TO, REPLIES.encode())]), message(1, audit[0], of), message(2, audit[1]),
             message(3, notify[1]), message(4, notify[0], of)]  # notify's ending folded before its ROUTED
    fold_batch(fold, cast(Any, consumer), cast(Any, producer), cast(Any, batch))
    told = [codec.decode(v, Receipt) for v in producer.to(NAMES.receipts)]
    assert [(r.message_id, r.status, r.fanout.deliveries[0].status if r.fanout else None) for r in told] == [
        (PARENT, Status.FANNED_OUT, Status.COMPLETED), (PARENT, Status.FANNED_OUT, Status.DEAD_LETTERED)]
    assert consumer.committed_at() == {(NAMES.receipts, 0): 5}
    row = fold.row(PARENT)
    assert row is not None and row.status is Status.FANNED_OUT and producer.to(REPLIES) == []

    fold_batch(fold, consumer, producer, [message(5 + i, r) for i, r in enumerate(told)])
    [end] = [codec.decode(v, Receipt) for v in producer.to(NAMES.receipts)][2:]
    assert end.status is Status.FAILED and end.error is not None and f"{NOTIFY} DEAD_LETTERED" in end.error.message
    fold_batch(fold, cast(Any, consumer), cast(Any, producer), cast(Any, [message(7, end), message(8, end)]))
    row = fold.row(PARENT)
    assert row is not None and row.status is Status.FAILED and row.fanout is not None
    assert {d.agent_id: d.status for d in row.fanout.deliveries} == {AUDIT: Status.COMPLETED,
                                                                     NOTIFY: Status.DEAD_LETTERED}
    assert [codec.decode(v, Receipt).status for v in producer.to(REPLIES)] == [Status.FAILED], "one reply"
    assert len(producer.to(NAMES.receipts)) == 3, "nothing more is produced"
    [callback] = [codec.decode(v, Envelope) for v in producer.to(WEBHOOK)]
    assert callback.parent_id == PARENT and b"FAILED" in callback.payload, "the event's caller hears once, at its end"


def test_a_forged_delivery_ending_neither_takes_over_another_tenants_row_nor_names_a_non_derived_parent(
        tmp_path: Path) -> None:
    """Security finding (forged fan-out parent): a FANNED_OUT step from another tenant, or one whose delivery id is
    not derived from the message it names, is dropped; the queued message's row stays its own."""
    fold, consumer, producer = status_fold(tmp_path), FakeConsumer(assigned=OWNED), Producer(known={REPLIES, WEBHOOK})
    queued = Receipt(message_id="victim", trace_id="t9", tenant="bank", capability="demo.pay", status=Status.ACCEPTED,
                     at=1_000)
    from_other = Receipt(message_id="victim", trace_id="t1", tenant="acme", capability=CAP, status=Status.FANNED_OUT,
                         at=2_000, fanout=fanout.announced([AUDIT], "victim", 0))
    not_derived = Receipt(message_id="victim", trace_id="t1", tenant="bank", capability=CAP, status=Status.FANNED_OUT,
                          at=2_000, fanout=fanout.announced([AUDIT], "another", 0))
    lying = Receipt(message_id="x-1", trace_id="t1", tenant="acme", capability=CAP, status=Status.COMPLETED, at=2_500,
                    agent_id=AUDIT, instance_id="i")
    batch = [message(0, queued), message(1, from_other), message(2, not_derived),
             message(3, lying, [(H.FANOUT_OF, b"victim")])]
    fold_batch(fold, cast(Any, consumer), cast(Any, producer), cast(Any, batch))
    row = fold.row("victim")
    assert row is not None and (row.status, row.tenant, row.fanout) == (Status.ACCEPTED, "bank", None)
    assert row.timeline[-1].status is Status.ACCEPTED and len(row.timeline) == 1
    assert producer.to(NAMES.receipts) == [], "an ending whose id is not derived from the header's id reports nothing"
