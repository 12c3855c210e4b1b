"""Receipts the intent parts write on an envelope's behalf (resolver, handoff desk, the router's handoff), pure."""

from __future__ import annotations

from typing import Any

from reach.intent.catalog import RESERVED
from reach.records import Receipt, Status


def receipt(envelope: dict[str, Any], status: Status, at: int, **fields: Any) -> Receipt:
    """A receipt of `envelope` (the decoded dict) with its identity, budget and callback."""
    return Receipt(
        message_id=envelope["message_id"], generation=envelope.get("generation", 0), trace_id=envelope["trace_id"],
        tenant=envelope["tenant"], capability=envelope.get("capability") or RESERVED, status=status,
        attempt=envelope.get("attempt", 1), at=at, deadline=envelope.get("deadline"),
        delivery_timeout_ms=envelope.get("delivery_timeout_ms"), callback=envelope.get("callback"),
        reroutes=envelope.get("reroutes", 0), **fields,
    )
