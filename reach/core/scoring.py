"""Scoring: a pure function of (request, candidates, weights, context) giving every score and the pick.

score = (sum over the factors of weight[f] x value_f(candidate)) x effective weight

- the factors, their maths and default weights are the one list reach.core.factors.FACTORS (fit 0.4,
  locality 0.2, load 0.3, affinity 0.1; health, priority, cost 0 by default);
- the effective weight is the instance's declared AgentRegistration.weight x its health table weight
  (InstanceHealth.weight: 0 while ejected or slow, a share while restored); an instance whose effective
  weight is 0 stays eligible but is picked only when no candidate has a weight above 0 (then by its
  unmultiplied score).

The pick is the best score, drawn at random among candidates within TIE_BAND of it (tie jitter),
except that a session stays on its instance while that instance is a candidate (healthy, not shed
by backpressure, effective weight above 0) and the affinity weight is positive: session affinity keeps a
session_key on the same instance while it is healthy. An affinity weight of 0 turns stickiness off.
Every factor's value is computed and recorded, also for a weight of 0: the multiplication costs less
than the branch, and the ROUTED receipt shows what a weight change would do.
"""

from __future__ import annotations

import math
import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from operator import mul
from typing import NamedTuple

from reach.core.candidates import Candidate, RouteRequest
from reach.core.factors import (
    FACTORS,
    INDEX,
    LEGACY,
    NAMES,
    FactorWeights,
    ScoringContext,
    as_factor_weights,
    effective_weight,
    sticky_instance,
)
from reach.records import InstanceHealth, Weights

TIE_BAND = 0.05
_INF = math.inf
_AFFINITY = INDEX["affinity"]
_LEGACY_AT = tuple((name, INDEX[name]) for name in LEGACY)
_STABLE = tuple(i for i, factor in enumerate(FACTORS) if factor.batch_stable)
_CHANGING = tuple((i, factor.values) for i, factor in enumerate(FACTORS) if not factor.batch_stable)
_new = tuple.__new__  # ScoreParts without its generated __new__'s argument handling: 0.2 vs 0.35 µs


class ScoreParts(NamedTuple):
    """One candidate's score and every factor's value (mirrors records.CandidateScore).

    A NamedTuple, not a frozen dataclass: one is built per candidate per request, and a frozen
    dataclass's __init__ cost 4x more (docs/performance.md)."""

    instance_id: str
    agent_id: str
    score: float
    parts: tuple[float, ...]  # one value per factor, in reach.core.factors.FACTORS order
    arm: str | None = None  # the candidate's canary arm, when admission assigned one

    def part(self, name: str) -> float:
        return self.parts[INDEX[name]]

    def parts_map(self) -> dict[str, float]:
        return dict(zip(NAMES, self.parts, strict=True))

    def as_dict(self) -> dict[str, object]:
        """The CandidateScore record: the fixed fields older readers know, the parts map and the arm."""
        return {
            "instance_id": self.instance_id,
            "agent_id": self.agent_id,
            "score": self.score,
            **{name: self.parts[i] for name, i in _LEGACY_AT},
            "parts": self.parts_map(),
            "arm": self.arm,
        }


@dataclass(frozen=True, slots=True)
class ScoredDecision:
    """Every candidate's score (input order), the picked candidate and why it was picked."""

    scores: tuple[ScoreParts, ...]
    picked: Candidate
    weights: FactorWeights
    reason: str  # "best" | "tie" | "affinity" | "zero-weight" (every candidate's effective weight is 0)
    arm: str | None = None  # the picked instance's canary arm

    @property
    def picked_instance(self) -> str:
        return self.picked.instance_id

    def weights_dict(self) -> dict[str, float]:
        """The Decision.weights map: every factor's weight."""
        return dict(self.weights)


def stable_columns(request: RouteRequest, candidates: Sequence[Candidate],
                   context: ScoringContext) -> tuple[list[float], ...]:
    """The values of the `batch_stable` factors (FACTORS order), which `score` takes as `stable` for every request of
    the same shape among the same candidates within a batch."""
    return tuple(FACTORS[i].values(request, candidates, context) for i in _STABLE)


def _scored(
    request: RouteRequest, candidates: Sequence[Candidate], weights: FactorWeights, context: ScoringContext,
    stable: Sequence[list[float]] | None = None,
) -> tuple[tuple[ScoreParts, ...], list[float], list[float]]:
    """Every candidate's parts, its effective weight and its unmultiplied total."""
    if stable is None:
        columns = [factor.values(request, candidates, context) for factor in FACTORS]
    else:
        columns = list(stable)  # the changing factors go in at their places (ascending)
        for i, values in _CHANGING:
            columns.insert(i, values(request, candidates, context))
    vector, health, arms = weights.vector, context.health, context.arms
    scores: list[ScoreParts] = []
    multipliers: list[float] = []
    totals: list[float] = []
    rows = zip(*columns, strict=False)  # equal lengths by construction; strict=True costs per row
    for candidate, row in zip(candidates, rows, strict=False):
        parts, multiplier, total = _one(candidate, row, vector, health, arms)
        scores.append(parts)
        multipliers.append(multiplier)
        totals.append(total)
    return tuple(scores), multipliers, totals


def _one(candidate: Candidate, row: tuple[float, ...], vector: tuple[float, ...],
         health: Mapping[str, InstanceHealth], arms: Mapping[str, str]) -> tuple[ScoreParts, float, float]:
    """One candidate's parts, effective weight and unmultiplied total, from its factor values."""
    reg = candidate.registration
    instance_id = reg.instance_id
    total = sum(map(mul, vector, row))
    if health:
        multiplier = effective_weight(reg, health.get(instance_id))
    else:  # effective_weight's rule for the declared weight alone, inline: the common case
        multiplier = reg.weight if 0.0 <= reg.weight < _INF else 1.0
    parts = _new(ScoreParts, (instance_id, reg.agent_id, total * multiplier, row,
                              arms.get(instance_id) if arms else None))
    return parts, multiplier, total


class ScoreBoard:
    """The scores of one candidate set, kept current across the requests of one shape within a batch.

    Between two such requests only a candidate's load changes (the router's own decisions: the picked one has one
    more queued), so `current` scores again only the candidates whose Candidate value changed; the others keep their
    row. For requests without a sticky session and without canary arms (the affinity column is then all 0 and no
    score carries an arm); `stable` serves the others of the shape."""

    __slots__ = ("_candidates", "_multipliers", "_scores", "_totals", "stable", "weights")

    def __init__(self, request: RouteRequest, candidates: Sequence[Candidate], weights: FactorWeights,
                 context: ScoringContext) -> None:
        self.weights = weights
        self.stable = stable_columns(request, candidates, context)
        scores, self._multipliers, self._totals = _scored(request, candidates, weights, context, self.stable)
        self._scores = list(scores)
        self._candidates = list(candidates)

    def current(self, request: RouteRequest, candidates: Sequence[Candidate],
                context: ScoringContext) -> tuple[tuple[ScoreParts, ...], list[float], list[float]]:
        """What `_scored` gives for `candidates` (the board's set, in its order, loads now)."""
        known, stable, vector = self._candidates, self.stable, self.weights.vector
        for i, candidate in enumerate(candidates):
            if candidate is known[i]:
                continue
            known[i] = candidate
            row = [column[i] for column in stable]
            for at, values in _CHANGING:
                row.insert(at, values(request, (candidate,), context)[0])
            self._scores[i], self._multipliers[i], self._totals[i] = _one(candidate, tuple(row), vector,
                                                                          context.health, context.arms)
        return tuple(self._scores), self._multipliers, self._totals


def score_all(
    request: RouteRequest,
    candidates: Sequence[Candidate],
    weights: Mapping[str, float] | Weights,
    context: ScoringContext,
) -> tuple[ScoreParts, ...]:
    """Score every candidate without picking (the OVERLOAD receipt's record of who was considered)."""
    return _scored(request, candidates, as_factor_weights(weights), context)[0]


def score(
    request: RouteRequest,
    candidates: Sequence[Candidate],
    weights: Mapping[str, float] | Weights,
    context: ScoringContext,
    rng: random.Random,
    *,
    stable: Sequence[list[float]] | None = None,
    board: ScoreBoard | None = None,
) -> ScoredDecision:
    """Score every candidate and pick one; `candidates` must not be empty.

    `weights` maps factor name -> weight (the router passes ControlView.weights(), a FactorWeights resolved
    once per control record; a missing factor weighs its default); `rng` only breaks ties within TIE_BAND.
    `stable`: the `stable_columns` of these candidates for a request of this shape, when already computed; `board`:
    their ScoreBoard, for a request it serves (no sticky session, no arms).
    """
    if not candidates:
        raise ValueError("score() needs at least one candidate; the filter decides what no candidate means")
    resolved = as_factor_weights(weights)
    if board is not None:
        scores, multipliers, totals = board.current(request, candidates, context)
    else:
        scores, multipliers, totals = _scored(request, candidates, resolved, context, stable)
    live = [i for i, m in enumerate(multipliers) if m > 0]
    sticky = sticky_instance(request, context)
    if sticky is not None and resolved.vector[_AFFINITY] > 0:
        for i, candidate in enumerate(candidates):
            if candidate.instance_id == sticky and (multipliers[i] > 0 or not live):
                return ScoredDecision(scores, candidate, resolved, "affinity", scores[i].arm)
    if live:
        values = [s.score for s in scores]
        pool = live
    else:  # every candidate at weight 0: still served, by the unmultiplied score
        values, pool = totals, list(range(len(candidates)))
    best = max(values[i] for i in pool)
    band = [i for i in pool if values[i] >= best - TIE_BAND]
    picked = band[0] if len(band) == 1 else rng.choice(band)
    reason = "zero-weight" if not live else "best" if len(band) == 1 else "tie"
    return ScoredDecision(scores, candidates[picked], resolved, reason, scores[picked].arm)
