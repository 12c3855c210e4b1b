"""Scoring: a pure function of (request, candidates, weights, affinity) giving every score and the pick.

score = w.fit * capability_fit + w.locality * locality + w.load * (1 - load_ratio) + w.affinity * affinity

- capability_fit = 0.7 * version closeness + 0.3 * share of the requested tags the capability carries;
  closeness is 1 for the range's lower bound and falls with the distance above it
  (1 / (1 + majors + minors/10 + patches/100)), so `^1.2` prefers 1.2.x over 1.9.0.
- locality = 1 when the request names no region or the regions match, 0.5 when the instance
  reports none, else 0.
- load_ratio = (occupancy + queue) / (max_concurrency + max_queue), clipped to [0, 1] (reach.loads):
  handlers running plus requests waiting, relative to everything the instance takes.
- affinity = 1 for the instance that already serves the request's session_key.

The pick is the best score, drawn at random among candidates within TIE_BAND of it (tie jitter),
except that a session stays on its instance while that instance is a candidate (healthy, not shed
by backpressure) and the affinity weight is positive: session affinity keeps a session_key on the
same instance while it is healthy. An affinity weight of 0 turns stickiness off.
"""

from __future__ import annotations

import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import NamedTuple

from semver import Version

from reach.candidates import Candidate, RouteRequest
from reach.records import Weights
from reach.versions import parse_range

TIE_BAND = 0.05
_VERSION_SHARE = 0.7
_LOWER_OPS = frozenset({">=", "=", ">"})


class ScoreParts(NamedTuple):
    """One candidate's score and the parts it was made of (mirrors records.CandidateScore).

    A NamedTuple, not a frozen dataclass: one is built per candidate per request, and a frozen
    dataclass's __init__ cost 4x more (docs/performance.md)."""

    instance_id: str
    agent_id: str
    score: float
    fit: float
    locality: float
    load: float
    affinity: float

    def as_dict(self) -> dict[str, object]:
        return {
            "instance_id": self.instance_id,
            "agent_id": self.agent_id,
            "score": self.score,
            "fit": self.fit,
            "locality": self.locality,
            "load": self.load,
            "affinity": self.affinity,
        }


@dataclass(frozen=True, slots=True)
class ScoredDecision:
    """Every candidate's score (input order), the picked candidate and why it was picked."""

    scores: tuple[ScoreParts, ...]
    picked: Candidate
    weights: Weights
    reason: str  # "best" | "tie" | "affinity"

    @property
    def picked_instance(self) -> str:
        return self.picked.instance_id

    def weights_dict(self) -> dict[str, float]:
        w = self.weights
        return {"fit": w.fit, "locality": w.locality, "load": w.load, "affinity": w.affinity}


@lru_cache(maxsize=16384)
def version_closeness(version_text: str, range_text: str) -> float:
    """1.0 at the range's lower bound (or for a range without one), less the further above it."""
    version = Version.parse(version_text)
    lower: Version | None = None
    for alternative in parse_range(range_text):
        bounds = [bound for op, bound in alternative if op in _LOWER_OPS]
        if bounds:
            candidate = max(bounds)
            if candidate <= version and (lower is None or candidate > lower):
                lower = candidate
    if lower is None:
        return 1.0
    majors = version.major - lower.major
    minors = version.minor - lower.minor if majors == 0 else version.minor
    patches = version.patch - lower.patch if majors == 0 and minors == 0 else version.patch
    distance = max(majors, 0) + max(minors, 0) / 10 + max(patches, 0) / 100
    return 1.0 / (1.0 + distance)


def capability_fit(request: RouteRequest, candidate: Candidate) -> float:
    closeness = version_closeness(candidate.capability.version, request.version_range)
    if request.tags:
        have = set(candidate.capability.tags)
        tags = sum(1 for tag in request.tags if tag in have) / len(request.tags)
    else:
        tags = 1.0
    return _VERSION_SHARE * closeness + (1 - _VERSION_SHARE) * tags


def locality(request: RouteRequest, candidate: Candidate) -> float:
    if not request.region:
        return 1.0
    region = candidate.registration.region
    if region is None:
        return 0.5
    return 1.0 if region == request.region else 0.0


def parts(
    request: RouteRequest, candidate: Candidate, weights: Weights, affinity_instance: str | None
) -> ScoreParts:
    """Score one candidate."""
    fit = capability_fit(request, candidate)
    loc = locality(request, candidate)
    room = 1.0 - candidate.load_ratio
    aff = 1.0 if affinity_instance == candidate.instance_id else 0.0
    total = weights.fit * fit + weights.locality * loc + weights.load * room + weights.affinity * aff
    return ScoreParts(candidate.instance_id, candidate.agent_id, total, fit, loc, room, aff)


def score(
    request: RouteRequest,
    candidates: Sequence[Candidate],
    weights: Weights,
    affinity: Mapping[str, str],
    rng: random.Random,
) -> ScoredDecision:
    """Score every candidate and pick one; `candidates` must not be empty.

    `affinity` maps session_key -> instance_id; `rng` only breaks ties within TIE_BAND.
    """
    if not candidates:
        raise ValueError("score() needs at least one candidate; the filter decides what no candidate means")
    sticky = affinity.get(request.session_key) if request.session_key else None
    scores = tuple(parts(request, c, weights, sticky) for c in candidates)
    if sticky is not None and weights.affinity > 0:
        for candidate in candidates:
            if candidate.instance_id == sticky:
                return ScoredDecision(scores, candidate, weights, "affinity")
    best = max(s.score for s in scores)
    band = [c for c, s in zip(candidates, scores, strict=True) if s.score >= best - TIE_BAND]
    picked = band[0] if len(band) == 1 else rng.choice(band)
    return ScoredDecision(scores, picked, weights, "best" if len(band) == 1 else "tie")
