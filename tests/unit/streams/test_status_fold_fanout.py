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
from tests.unit.streams.kafka_fakes import FakeConsumer, FakeMessage
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
    fold._batch(cast(Any, consumer), cast(Any, producer), cast(Any, batch))
    told = [codec.decode(v, Receipt) for v in producer.to(NAMES.receipts)]
    assert [(r.message_id, r.status, r.fanout.deliveries[0].status if r.fanout else None) for r in told] == [
        (PARENT, Status.FANNED_OUT, Status.COMPLETED), (PARENT, Status.FANNED_OUT, Status.DEAD_LETTERED)]
    assert consumer.committed_at() == {(NAMES.receipts, 0): 5}
    row = fold.row(PARENT)
    assert row is not None and row.status is Status.FANNED_OUT and producer.to(REPLIES) == []

    fold._batch(cast(Any, consumer), cast(Any, producer), cast(Any, [message(5 + i, r) for i, r in enumerate(told)]))
    [end] = [codec.decode(v, Receipt) for v in producer.to(NAMES.receipts)][2:]
    assert end.status is Status.FAILED and end.error is not None and f"{NOTIFY} DEAD_LETTERED" in end.error.message
    fold._batch(cast(Any, consumer), cast(Any, producer), cast(Any, [message(7, end), message(8, end)]))
    row = fold.row(PARENT)
    assert row is not None and row.status is Status.FAILED and row.fanout is not None
    assert {d.agent_id: d.status for d in row.fanout.deliveries} == {AUDIT: Status.COMPLETED,
                                                                     NOTIFY: Status.DEAD_LETTERED}
    assert [codec.decode(v, Receipt).status for v in producer.to(REPLIES)] == [Status.FAILED], "one reply"
    assert len(producer.to(NAMES.receipts)) == 3, "nothing more is produced"
    [callback] = [codec.decode(v, Envelope) for v in producer.to(WEBHOOK)]
    assert callback.parent_id == PARENT and b"FAILED" in callback.payload, "the event's caller hears once, at its end"
