"""`reach intents stats`, pure: the share of each resolution stage and the success of what each stage sent on."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from reach.intent.stages import STAGES
from reach.intent.unroutable import ROUTER
from reach.records import Receipt, Status


@dataclass
class StageStats:
    """Counts for one stage."""

    resolved: int = 0
    ended: int = 0
    completed: int = 0
    human: int = 0  # of the completed: answered by an operator

    def success(self) -> float | None:
        return self.completed / self.ended if self.ended else None


@dataclass
class IntentStats:
    """The fold of receipts into per-stage shares and success."""

    stages: dict[str, StageStats] = field(default_factory=lambda: {s: StageStats() for s in STAGES})
    policy_handoffs: int = 0  # requests naming a capability nobody served, handed off by its policy (not intents)
    _stage_of: dict[tuple[str, int], str] = field(default_factory=dict)
    _ended: set[tuple[str, int]] = field(default_factory=set)
    _early: dict[tuple[str, int], Receipt] = field(default_factory=dict)  # a terminal read before its resolution

    def add(self, receipt: Receipt) -> None:
        key = (receipt.message_id, receipt.generation)
        res = receipt.resolution
        if receipt.status is Status.INTENT_RESOLVED and res is not None and res.stage in self.stages:
            if res.stage == "handoff" and res.by == ROUTER:  # a request that named a capability nobody served
                self.policy_handoffs += key not in self._ended
                self._ended.add(key)
                return
            if key not in self._stage_of:
                self._stage_of[key] = res.stage
                self.stages[res.stage].resolved += 1
                early = self._early.pop(key, None)
                if early is not None:
                    self._end(key, early)
            return
        if receipt.status.is_terminal and key not in self._ended:
            if key in self._stage_of:
                self._end(key, receipt)
            else:
                self._early.setdefault(key, receipt)

    def _end(self, key: tuple[str, int], receipt: Receipt) -> None:
        self._ended.add(key)
        stats = self.stages[self._stage_of[key]]
        stats.ended += 1
        if receipt.status is Status.COMPLETED:
            stats.completed += 1
            if receipt.resolution is not None and receipt.resolution.stage == "human":
                stats.human += 1

    @property
    def total(self) -> int:
        return sum(s.resolved for s in self.stages.values())

    def share(self, stage: str) -> float:
        return self.stages[stage].resolved / self.total if self.total else 0.0

    def as_dict(self) -> dict[str, object]:
        return {"total": self.total, "policy_handoffs": self.policy_handoffs, "stages": {
            name: {"resolved": s.resolved, "share": round(self.share(name), 4), "ended": s.ended,
                   "completed": s.completed, "human": s.human, "success": s.success()}
            for name, s in self.stages.items()}}


def fold(receipts: Iterable[Receipt]) -> IntentStats:
    stats = IntentStats()
    for receipt in receipts:
        stats.add(receipt)
    return stats
