"""Dual dispatch bookkeeping, pure: the first valid child answer completes the request, the other is discarded.

Each branch is a child message (its own message_id, parent_id = the request) whose first terminal receipt
comes back on the resolver's reply topic. The request keeps exactly one terminal status: the first child
COMPLETED completes it; a child that ends after that is recorded as discarded; when both fail the request
fails with the last child's error. A pair's state is a record on the compacted `<ns>.dual-pairs` topic
(keyed by the request's message_id: the fields its receipts need, the children, how each ended, the winner;
a tombstone once both branches ended), written with the children and
after every answer, so a restarted resolver (same REACH_RESOLVER_ID: same reply topic and reply group)
restores its pending pairs and completes them from the replies it has not committed yet.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict

from reach.records import Receipt, Status

Action = Literal["complete", "discard", "fail", "wait"]
EARLY_ANSWERS = 4_096
EARLY_BYTES = 32 * 1024 * 1024
"""Answers kept for children no tracked pair knows yet (at most this many, and about this many bytes of results
and errors): a pair is tracked once the write of its children is acknowledged, and a child whose request's
write was refused (read again, dispatched again with the same ids) can answer before its pair is tracked; its
status-fold reply is sent once, so dropping it would leave the request to its deadline."""
ENDED_REMEMBERED = 16_384  # children whose pair settled them: a repeat of their answer is not kept as early
# what the request's receipts are built from (reach.intent.receipts, the reply_to header): stored instead of
# the whole envelope, so a pair record stays small whatever the payload
PARENT_FIELDS = ("message_id", "generation", "trace_id", "tenant", "capability", "attempt", "deadline",
                 "delivery_timeout_ms", "callback", "reroutes", "intent", "reply_to")


class PairRecord(BaseModel):
    """A pending dual dispatch as stored on `<ns>.dual-pairs` (JSON)."""

    model_config = ConfigDict(frozen=True)

    parent_id: str
    owner: str  # the resolver id whose reply topic the children answer on
    parent: dict[str, str | int | None]  # the request's PARENT_FIELDS
    children: dict[str, str]  # child message_id -> capability
    ended: dict[str, str] = {}  # child message_id -> its first terminal status
    won: str | None = None
    deadline: int | None = None


@dataclass
class _Pair:
    parent: dict[str, Any]
    owner: str
    children: dict[str, str]  # child message_id -> capability
    ended: dict[str, Status] = field(default_factory=dict)
    won: str | None = None

    def record(self) -> PairRecord | None:
        """What to store now; None once both branches ended (the key is tombstoned)."""
        if len(self.ended) == len(self.children):
            return None
        return PairRecord(parent_id=self.parent["message_id"], owner=self.owner, parent=self.parent,
                          children=self.children,
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
        self._early: OrderedDict[str, Receipt] = OrderedDict()  # child message_id -> its answer
        self._early_bytes = 0
        self._ended: OrderedDict[str, None] = OrderedDict()  # children settled here, most recent last

    def __len__(self) -> int:
        return len({id(p) for p in self._by_child.values()})

    @staticmethod
    def new_record(envelope: dict[str, Any], children: dict[str, str], *, owner: str) -> PairRecord:
        """The record of a pair about to be dispatched (stored with its children, tracked once acknowledged)."""
        parent = {name: envelope[name] for name in PARENT_FIELDS if name in envelope}
        record = _Pair(parent, owner, dict(children)).record()
        assert record is not None  # nothing has ended yet
        return record

    def dispatched(self, envelope: dict[str, Any], children: dict[str, str]) -> list[Outcome]:
        """Track a new pair without storing it (tests)."""
        return self.restore(self.new_record(envelope, children, owner=""))

    def restore(self, record: PairRecord) -> list[Outcome]:
        """Track a pair: one just dispatched, or one read back from the pairs topic after a restart. A pair
        already tracked keeps the state it has (the same request resolved again yields the same children).
        Returns what answers that arrived before it was tracked settle."""
        if any(child in self._by_child for child in record.children):
            return []
        pair = _Pair(dict(record.parent), record.owner, dict(record.children),
                     {k: Status(v) for k, v in record.ended.items()}, record.won)
        for child in record.children:
            if child not in pair.ended:
                self._by_child[child] = pair
        # in the order they arrived: the first valid answer wins, as it would have had the pair been tracked
        early = [child for child in self._early if child in record.children]
        answers = [self._drop_early(child) for child in early]
        for child in pair.ended:  # settled before (the stored state says so): their answers are repeats
            self._remember_ended(child)
        return [outcome for receipt in answers
                if receipt.message_id not in pair.ended and (outcome := self.answered(receipt)) is not None]

    @property
    def early(self) -> list[Receipt]:
        """The answers kept for pairs not tracked yet, oldest first (carried over when the worker restarts)."""
        return list(self._early.values())

    def answered_all(self, receipts: list[Receipt]) -> list[Outcome]:
        """`answered` for each, in order: what they settle (the others are kept as early answers)."""
        return [outcome for receipt in receipts if (outcome := self.answered(receipt)) is not None]

    def _drop_early(self, child: str) -> Receipt:
        receipt = self._early.pop(child)
        self._early_bytes -= _size(receipt)
        return receipt

    def _remember_ended(self, child: str) -> None:
        self._ended[child] = None
        while len(self._ended) > ENDED_REMEMBERED:
            self._ended.popitem(last=False)

    def _keep(self, receipt: Receipt) -> None:
        if receipt.message_id in self._early or receipt.message_id in self._ended:
            return  # a repeat, or the answer of a child whose pair already settled it
        self._early[receipt.message_id] = receipt
        self._early_bytes += _size(receipt)
        while self._early and (len(self._early) > EARLY_ANSWERS or self._early_bytes > EARLY_BYTES):
            self._drop_early(next(iter(self._early)))

    def answered(self, receipt: Receipt) -> Outcome | None:
        """One child's first terminal receipt; None for a receipt no pending pair knows (kept a while, in case
        its pair is tracked next) or a repeat."""
        if not receipt.status.is_terminal:
            return None
        pair = self._by_child.get(receipt.message_id)
        if pair is None:
            self._keep(receipt)
            return None
        if receipt.message_id in pair.ended:
            return None
        pair.ended[receipt.message_id] = receipt.status
        self._by_child.pop(receipt.message_id, None)
        self._remember_ended(receipt.message_id)
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


def _size(receipt: Receipt) -> int:
    """About what an early answer holds in memory: its result and error, plus a fixed part for the rest."""
    error = receipt.error
    return 512 + len(receipt.result or b"") + (len(error.message or "") if error is not None else 0)
