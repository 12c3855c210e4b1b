"""Dual dispatch bookkeeping, pure: the first valid child answer completes the request, the other is discarded.

Each branch is a child message (its own message_id, parent_id = the request) whose first terminal receipt
comes back on the resolver's reply topic. The request keeps exactly one terminal status: the first child
COMPLETED completes it; a child that ends after that is recorded as discarded; when both fail the request
fails with the last child's error. A pair's state is a record on the compacted `<ns>.dual-pairs` topic
(keyed by the request's message_id, a tombstone once both branches ended), written with the children and
after every answer, so a restarted resolver (same REACH_RESOLVER_ID: same reply topic and reply group)
restores its pending pairs and completes them from the replies it has not committed yet.
"""

from __future__ import annotations

import base64
from dataclasses import dataclass, field
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict

from reach.records import Receipt, Status

Action = Literal["complete", "discard", "fail", "wait"]


class PairRecord(BaseModel):
    """A pending dual dispatch as stored on `<ns>.dual-pairs` (JSON)."""

    model_config = ConfigDict(frozen=True)

    parent_id: str
    owner: str  # the resolver id whose reply topic the children answer on
    envelope: str  # the request envelope's bytes, base64: the parent's receipts are built from it
    children: dict[str, str]  # child message_id -> capability
    ended: dict[str, str] = {}  # child message_id -> its first terminal status
    won: str | None = None
    deadline: int | None = None

    def envelope_bytes(self) -> bytes:
        return base64.b64decode(self.envelope)


@dataclass
class _Pair:
    parent: dict[str, Any]
    raw: bytes
    owner: str
    children: dict[str, str]  # child message_id -> capability
    ended: dict[str, Status] = field(default_factory=dict)
    won: str | None = None

    def record(self) -> PairRecord | None:
        """What to store now; None once both branches ended (the key is tombstoned)."""
        if len(self.ended) == len(self.children):
            return None
        return PairRecord(parent_id=self.parent["message_id"], owner=self.owner,
                          envelope=base64.b64encode(self.raw).decode(), children=self.children,
                          ended={k: str(v) for k, v in self.ended.items()}, won=self.won,
                          deadline=self.parent.get("deadline"))


@dataclass(frozen=True)
class Outcome:
    """What to record on the parent for one child's terminal receipt, and the pair's state to store."""

    action: Action
    parent: dict[str, Any]
    child_id: str
    capability: str
    receipt: Receipt
    state: PairRecord | None  # None: both ended, tombstone the pair


class DualTracker:
    """Pending dual dispatches by child message_id."""

    def __init__(self) -> None:
        self._by_child: dict[str, _Pair] = {}

    def __len__(self) -> int:
        return len({id(p) for p in self._by_child.values()})

    @staticmethod
    def new_record(parent: dict[str, Any], children: dict[str, str], *, raw: bytes, owner: str) -> PairRecord:
        """The record of a pair about to be dispatched (stored with its children, tracked once acknowledged)."""
        record = _Pair(parent, raw, owner, dict(children)).record()
        assert record is not None  # nothing has ended yet
        return record

    def dispatched(self, parent: dict[str, Any], children: dict[str, str]) -> None:
        """Track a new pair (without a stored record: tests, and a resolver that keeps none)."""
        self.restore(self.new_record(parent, children, raw=b"", owner=""), parent)

    def restore(self, record: PairRecord, parent: dict[str, Any]) -> None:
        """Track a pair read back from the pairs topic (`parent`: its envelope decoded)."""
        pair = _Pair(parent, record.envelope_bytes(), record.owner, dict(record.children),
                     {k: Status(v) for k, v in record.ended.items()}, record.won)
        for child in record.children:
            if child not in pair.ended:
                self._by_child[child] = pair

    def answered(self, receipt: Receipt) -> Outcome | None:
        """One child's first terminal receipt; None for a receipt no pending pair knows or a repeat."""
        pair = self._by_child.get(receipt.message_id)
        if pair is None or receipt.message_id in pair.ended or not receipt.status.is_terminal:
            return None
        pair.ended[receipt.message_id] = receipt.status
        self._by_child.pop(receipt.message_id, None)
        capability = pair.children[receipt.message_id]
        if pair.won is not None:
            action: Action = "discard"
        elif receipt.status is Status.COMPLETED:
            pair.won = receipt.message_id
            action = "complete"
        elif len(pair.ended) == len(pair.children):
            action = "fail"
        else:
            action = "wait"  # a failed branch while the other may still answer
        return Outcome(action, pair.parent, receipt.message_id, capability, receipt, pair.record())
