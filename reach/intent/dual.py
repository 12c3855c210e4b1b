"""Dual dispatch bookkeeping, pure: the first valid child answer completes the request, the other is discarded.

Each branch is a child message (its own message_id, parent_id = the request) whose first terminal receipt
comes back on the resolver's reply topic. The request keeps exactly one terminal status: the first child
COMPLETED completes it; a child that ends after that is recorded as discarded; when both fail the request
fails with the last child's error. Pending pairs live in memory: a resolver restarted between dispatch and
answer leaves the request to its budget (EXPIRED), never with two terminals.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from reach.records import Receipt, Status

Action = Literal["complete", "discard", "fail"]


@dataclass
class _Pair:
    parent: dict[str, Any]
    children: dict[str, str]  # child message_id -> capability
    ended: dict[str, Status] = field(default_factory=dict)
    won: str | None = None


@dataclass(frozen=True)
class Outcome:
    """What to record on the parent for one child's terminal receipt."""

    action: Action
    parent: dict[str, Any]
    child_id: str
    capability: str
    receipt: Receipt


class DualTracker:
    """Pending dual dispatches by child message_id."""

    def __init__(self) -> None:
        self._by_child: dict[str, _Pair] = {}

    def __len__(self) -> int:
        return len({id(p) for p in self._by_child.values()})

    def dispatched(self, parent: dict[str, Any], children: dict[str, str]) -> None:
        pair = _Pair(parent, dict(children))
        for child in children:
            self._by_child[child] = pair

    def answered(self, receipt: Receipt) -> Outcome | None:
        """One child's first terminal receipt; None for a receipt no pending pair knows or a repeat."""
        pair = self._by_child.get(receipt.message_id)
        if pair is None or receipt.message_id in pair.ended or not receipt.status.is_terminal:
            return None
        pair.ended[receipt.message_id] = receipt.status
        capability = pair.children[receipt.message_id]
        if len(pair.ended) == len(pair.children):
            for child in pair.children:
                self._by_child.pop(child, None)
        if pair.won is not None:
            return Outcome("discard", pair.parent, receipt.message_id, capability, receipt)
        if receipt.status is Status.COMPLETED:
            pair.won = receipt.message_id
            return Outcome("complete", pair.parent, receipt.message_id, capability, receipt)
        if len(pair.ended) == len(pair.children):
            return Outcome("fail", pair.parent, receipt.message_id, capability, receipt)
        return None  # a failed branch while the other may still answer
