"""Weight-change preview (pure): re-score recorded ROUTED decisions under new weights and count the picks that change.

A ROUTED receipt carries every candidate's factor values (CandidateScore.parts), its score and the weights
it was scored with (Decision.weights). The candidate's effective-weight multiplier (declared weight x
health weight, reach.core.scoring) is recovered as score / sum(weight x part) under the recorded weights, so
the new score is sum(new weight x part) x that multiplier. A pick changes when the recorded pick is no
longer within the tie band of the best new score (a pick inside the band could have been drawn either
way). Session-affinity picks are re-scored like the others: the preview says what the scores do.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from reach.core.factors import NAMES, as_factor_weights
from reach.core.scoring import TIE_BAND
from reach.records import Decision, Receipt, Status


@dataclass
class Preview:
    """How many of the sampled decisions would pick another instance, and which moves they are."""

    sampled: int = 0
    changed: int = 0
    moves: Counter[tuple[str, str]] = field(default_factory=Counter)  # (recorded pick, new pick) -> count

    def as_dict(self) -> dict[str, object]:
        return {"sampled": self.sampled, "changed": self.changed,
                "moves": [{"from": a, "to": b, "count": n} for (a, b), n in self.moves.most_common()]}


def _total(weights: Mapping[str, float], parts: Mapping[str, float]) -> float:
    return sum(weights.get(name, 0.0) * parts.get(name, 0.0) for name in NAMES)


def rescored(decision: Decision, new: Mapping[str, float]) -> dict[str, float]:
    """Every candidate's score under `new` weights, by instance id."""
    old = dict(as_factor_weights(decision.weights or {}))
    weights = dict(as_factor_weights(new))
    out: dict[str, float] = {}
    for c in decision.candidates:
        parts = c.parts or {"fit": c.fit, "locality": c.locality, "load": c.load, "affinity": c.affinity}
        before = _total(old, parts)
        multiplier = c.score / before if before > 0 else 1.0
        out[c.instance_id] = _total(weights, parts) * multiplier
    return out


def new_pick(decision: Decision, new: Mapping[str, float]) -> str | None:
    """The instance the new weights would pick, or None when the recorded pick still stands (or there is none)."""
    picked = decision.picked_instance
    if not picked or len(decision.candidates) < 2:
        return None
    scores = rescored(decision, new)
    best_id = max(scores, key=lambda k: scores[k])
    if picked not in scores or scores[picked] >= scores[best_id] - TIE_BAND:
        return None
    return best_id


def preview(receipts: Iterable[Receipt], new: Mapping[str, float], *, capability: str | None,
            limit: int) -> Preview:
    """Re-score up to `limit` of the newest ROUTED decisions (of `capability`, or every one when None)."""
    routed = [r for r in receipts if r.status is Status.ROUTED and r.decision is not None
              and r.decision.picked_instance and (capability is None or r.capability == capability)]
    routed.sort(key=lambda r: r.at, reverse=True)
    result = Preview()
    for receipt in routed[:limit]:
        assert receipt.decision is not None
        result.sampled += 1
        moved = new_pick(receipt.decision, new)
        if moved is not None:
            result.changed += 1
            result.moves[(str(receipt.decision.picked_instance), moved)] += 1
    return result
