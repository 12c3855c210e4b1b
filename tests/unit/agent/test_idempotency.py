"""The retry cache's record encoding round-trips bytes, str headers and tombstones."""

from __future__ import annotations

from reach.agent.idempotency import decode_records, encode_records
from reach.failures import Outgoing


def test_records_round_trip() -> None:
    records = (Outgoing("ns.retry.1s", "k", b"\x00\xffv", [("x-reach-due-at", b"12"), ("s", "text")]),
               Outgoing("ns.receipts", "m", None, []))
    again = decode_records(encode_records(records))
    assert again[0] == Outgoing("ns.retry.1s", "k", b"\x00\xffv", [("x-reach-due-at", b"12"), ("s", b"text")])
    assert again[1] == records[1]
