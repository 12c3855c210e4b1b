"""The reply inbox's unclaimed receipts are bounded: a long-lived client does not grow without end."""

from __future__ import annotations

from reach.records import Receipt, Status
from reach.replypump import Arrivals


def receipt(mid: str, status: Status = Status.COMPLETED) -> Receipt:
    return Receipt(message_id=mid, trace_id="t", tenant="d", capability="c", status=status, at=1)


def test_the_first_receipt_per_message_is_kept_and_claimed_once() -> None:
    arrivals = Arrivals()
    arrivals.add(receipt("a"))
    arrivals.add(receipt("a", Status.FAILED))
    found = arrivals.pop(("a", 0))
    assert found is not None and found.status is Status.COMPLETED
    assert arrivals.pop(("a", 0)) is None


def test_unclaimed_receipts_are_dropped_oldest_first_beyond_the_limit() -> None:
    arrivals = Arrivals(limit=3)
    for i in range(10):
        arrivals.add(receipt(f"m{i}"))
    assert len(arrivals) == 3 and arrivals.dropped == 7
    assert arrivals.pop(("m0", 0)) is None and arrivals.pop(("m9", 0)) is not None
