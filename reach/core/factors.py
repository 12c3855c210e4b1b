"""Scoring factors: the one list the score, `reach weights`, the ROUTED record's maps and the docs derive from.

A factor is a name, a pure function and a default weight. The function takes (request, candidates, context)
and returns one value in [0, 1] per candidate, in the candidates' order. It sees the whole candidate set,
not one candidate, because a relative factor (cost) needs the set, and one call per factor per request
is cheaper than one per candidate on the router's hot path (decision 0010). `context` is a frozen
snapshot (ScoringContext) of the health table and the session affinity, taken by the router.

Adding a factor = appending a Factor to FACTORS: its weight travels in Control Weights.factors, its value
in CandidateScore.parts, its weight in Decision.weights (Avro maps, no schema release), `reach weights set`
grows an option and the table in docs/architecture.md (rendered by `markdown_table`, checked by a test)
a row. The first four also fill the fixed fields of Weights and CandidateScore for readers before v3/v4.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache
from types import MappingProxyType
from typing import NamedTuple

from semver import Version

from reach.core.candidates import Candidate, RouteRequest
from reach.core.versions import parse_range
from reach.records import AgentRegistration, InstanceHealth, Weights

_VERSION_SHARE = 0.7
_LOWER_OPS = frozenset({">=", "=", ">"})
NEUTRAL_COST = 0.5
"""The cost value of an instance that declares no cost, and of every instance when the candidates do not differ."""

_NO_HEALTH: Mapping[str, InstanceHealth] = MappingProxyType({})
_NONE: Mapping[str, str] = MappingProxyType({})
_NO_COSTS: Mapping[str, float] = MappingProxyType({})
MICROS = 1_000_000  # observed costs are in micro-units; declared ones in units of the currency per call


class ScoringContext(NamedTuple):
    """What scoring reads besides the request and the candidates: a frozen snapshot taken by the router.

    A NamedTuple like ScoreParts: the router builds one per request."""

    health: Mapping[str, InstanceHealth] = _NO_HEALTH  # by instance_id (the health table)
    affinity: Mapping[str, str] = _NONE  # session_key -> instance serving it
    arms: Mapping[str, str] = _NONE  # instance_id -> canary arm (admission fills it)
    costs: Mapping[str, float] = _NO_COSTS  # instance_id -> observed cost per successful call, micro-units


FactorValues = Callable[[RouteRequest, Sequence[Candidate], ScoringContext], list[float]]


@dataclass(frozen=True, slots=True)
class Factor:
    """One scoring factor: its name, its values per candidate (each in [0, 1]) and its default weight."""

    name: str
    values: FactorValues
    default: float
    meaning: str  # what 1.0 and 0.0 mean, for `reach weights set --help` and the docs table
    batch_stable: bool = True
    """Its values read only the request's shape (capability, version range, tags, region, priority, tenant), the
    candidate set and the context's health and costs: fixed within a batch, so the router computes them once per
    shape (reach.core.routing.Decider). False for what changes within a batch: loads, sessions; such a factor's value
    of one candidate must not depend on the others (a ScoreBoard scores one candidate again alone)."""


# -- the maths of each factor -------------------------------------------------------------------------


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
    """0.7 x version closeness + 0.3 x the share of the requested tags the capability carries."""
    closeness = version_closeness(candidate.capability.version, request.version_range)
    if request.tags:
        have = set(candidate.capability.tags)
        tags = sum(1 for tag in request.tags if tag in have) / len(request.tags)
    else:
        tags = 1.0
    return _VERSION_SHARE * closeness + (1 - _VERSION_SHARE) * tags


def sticky_instance(request: RouteRequest, context: ScoringContext) -> str | None:
    """The instance that already serves the request's session, if any."""
    return context.affinity.get(request.session_key) if request.session_key else None


def success_rate(health: InstanceHealth | None) -> float:
    """The 1-minute success rate; 1.0 when unknown (no record, no call in the minute, not a number)."""
    rate = None if health is None else health.success_1m
    if rate is None or math.isnan(rate):
        return 1.0
    return min(max(rate, 0.0), 1.0)


def priority_match(priority: int, priority_class: int) -> float:
    """1.0 when the instance's class is the request's priority, 1 / (1 + distance) otherwise."""
    return 1.0 / (1.0 + abs(priority - priority_class))


def declared_cost(registration: AgentRegistration) -> float | None:
    """The instance's declared cost per request; None when undeclared or not a finite number >= 0."""
    cost = registration.cost
    return cost if cost is not None and 0.0 <= cost < math.inf else None


def relative_costs(costs: Sequence[float | None]) -> list[float]:
    """1.0 for the cheapest declared cost, 0.0 for the dearest, linear between; NEUTRAL_COST when undeclared
    or when the declared costs do not differ (nothing to prefer)."""
    known = [c for c in costs if c is not None]
    if len(known) < 2:
        return [NEUTRAL_COST] * len(costs)
    cheapest, dearest = min(known), max(known)
    if dearest == cheapest:
        return [NEUTRAL_COST] * len(costs)
    span = dearest - cheapest
    return [NEUTRAL_COST if c is None else (dearest - c) / span for c in costs]


def _weight(value: float) -> float:
    return value if 0.0 <= value < math.inf else 1.0


def effective_weight(registration: AgentRegistration, health: InstanceHealth | None) -> float:
    """The score multiplier: the declared AgentRegistration.weight x the health table's weight (ejection, slow
    calls, gradual restore). A value that is not a finite number >= 0 counts as 1.0 (ignored, never fatal)."""
    weight = _weight(registration.weight)
    return weight if health is None else weight * _weight(health.weight)


# -- the factors as column functions ----------------------------------------------------------------


def _fit(request: RouteRequest, candidates: Sequence[Candidate], context: ScoringContext) -> list[float]:
    return [capability_fit(request, c) for c in candidates]


def _locality(request: RouteRequest, candidates: Sequence[Candidate], context: ScoringContext) -> list[float]:
    region = request.region
    if not region:
        return [1.0] * len(candidates)
    return [0.5 if (r := c.registration.region) is None else 1.0 if r == region else 0.0 for c in candidates]


def _load(request: RouteRequest, candidates: Sequence[Candidate], context: ScoringContext) -> list[float]:
    return [1.0 - c.load.ratio for c in candidates]


def _affinity(request: RouteRequest, candidates: Sequence[Candidate], context: ScoringContext) -> list[float]:
    sticky = sticky_instance(request, context)
    if sticky is None:
        return [0.0] * len(candidates)
    return [1.0 if c.registration.instance_id == sticky else 0.0 for c in candidates]


def _health(request: RouteRequest, candidates: Sequence[Candidate], context: ScoringContext) -> list[float]:
    table = context.health
    if not table:
        return [1.0] * len(candidates)
    return [success_rate(table.get(c.registration.instance_id)) for c in candidates]


def _priority(request: RouteRequest, candidates: Sequence[Candidate], context: ScoringContext) -> list[float]:
    priority = request.priority
    return [1.0 / (1.0 + abs(priority - c.registration.priority_class)) for c in candidates]


def instance_cost(registration: AgentRegistration, observed: Mapping[str, float]) -> float | None:
    """An instance's cost per call in units of the currency: observed (reach.core.costbook) when it has been,
    else declared (AgentRegistration.cost), else None."""
    measured = observed.get(registration.instance_id)
    return measured / MICROS if measured is not None else declared_cost(registration)


def _cost(request: RouteRequest, candidates: Sequence[Candidate], context: ScoringContext) -> list[float]:
    observed = context.costs
    if not observed:
        declared = [c.registration.cost for c in candidates]
        if declared.count(None) == len(declared):  # the common case, without a call per candidate
            return [NEUTRAL_COST] * len(declared)
    return relative_costs([instance_cost(c.registration, observed) for c in candidates])


FACTORS: tuple[Factor, ...] = (
    Factor("fit", _fit, 0.4, "0.7 x version closeness to the range's lower bound + 0.3 x share of requested tags"),
    Factor("locality", _locality, 0.2, "1 same region or none requested, 0.5 instance reports none, 0 other region"),
    Factor("load", _load, 0.3, "1 - (running + queued) / (max_concurrency + max_queue)", batch_stable=False),
    Factor("affinity", _affinity, 0.1, "1 for the instance already serving the session_key; > 0 keeps sessions",
           batch_stable=False),
    Factor("health", _health, 0.0, "1-minute success rate from the health table; 1 when not measured yet"),
    Factor("priority", _priority, 0.0, "1 / (1 + distance from the request priority to the instance priority_class)"),
    Factor("cost", _cost, 0.0, "1 cheapest to 0 dearest cost per call among the candidates: observed (usage, "
           "5 min) else declared; 0.5 when unknown"),
)
NAMES: tuple[str, ...] = tuple(f.name for f in FACTORS)
INDEX: Mapping[str, int] = MappingProxyType({name: i for i, name in enumerate(NAMES)})
LEGACY: tuple[str, ...] = tuple(name for name in Weights.model_fields if name != "factors")
"""Factors with a fixed field in Weights and CandidateScore (what readers before the maps read)."""
if not set(LEGACY) <= set(NAMES):  # pragma: no cover - a guard for whoever edits FACTORS
    raise RuntimeError(f"every fixed Weights field must be a factor: {LEGACY} vs {NAMES}")

PRESETS: Mapping[str, Mapping[str, float]] = MappingProxyType({
    "default": MappingProxyType({f.name: f.default for f in FACTORS}),
    # the other published weighting: priority 0.4, health 0.3, load 0.2, proximity (locality) 0.1
    "priority-health": MappingProxyType({"priority": 0.4, "health": 0.3, "load": 0.2, "locality": 0.1}),
    # the cheaper of equal instances first, spilling to dearer ones as it fills: cost 0.2 against load 0.25 keeps
    # the cheapest until it is ~80% fuller than the dearest (0.2 / 0.25); health 0.1 keeps a failing cheap one out
    "cost-aware": MappingProxyType({"fit": 0.25, "locality": 0.1, "load": 0.25, "affinity": 0.1, "health": 0.1,
                                    "cost": 0.2}),
})
"""Named weightings for `reach weights set --preset`; a factor a preset leaves out weighs 0."""


def preset(name: str) -> dict[str, float]:
    """Every factor's weight in the preset (0 for the factors it leaves out); KeyError for an unknown name."""
    chosen = PRESETS[name]
    return {f.name: chosen.get(f.name, 0.0) for f in FACTORS}


class FactorWeights(Mapping[str, float]):
    """The weight of every factor (FACTORS order), where each came from (a scope or "default"), and the names
    of a weights map that no factor has: kept (so rewriting a record keeps them for newer readers), never scored."""

    __slots__ = ("sources", "unknown", "vector")

    def __init__(self, weights: Mapping[str, float] | None = None, *, source: str = "given",
                 unknown: Mapping[str, float] | None = None) -> None:
        given = weights or {}
        self.vector: tuple[float, ...] = tuple(float(given.get(f.name, f.default)) for f in FACTORS)
        self.sources: tuple[str, ...] = tuple(source if f.name in given else "default" for f in FACTORS)
        self.unknown: dict[str, float] = {**(unknown or {}), **{k: v for k, v in given.items() if k not in INDEX}}

    @classmethod
    def of(cls, record: Weights, *, scope: str = "given") -> FactorWeights:
        """The weights a control record means: the map first, else the fixed field, else the default."""
        merged: dict[str, float] = {name: getattr(record, name) for name in LEGACY}
        merged.update(record.factors)
        return cls(merged, source=scope)

    def __getitem__(self, name: str) -> float:
        return self.vector[INDEX[name]]

    def __iter__(self) -> Iterator[str]:
        return iter(NAMES)

    def __len__(self) -> int:
        return len(NAMES)

    def __repr__(self) -> str:
        return f"FactorWeights({dict(self)!r}, unknown={self.unknown!r})"

    def source(self, name: str) -> str:
        return self.sources[INDEX[name]]

    def replaced(self, changes: Mapping[str, float]) -> FactorWeights:
        """These weights with some factors changed (unknown names stay kept)."""
        return FactorWeights({**self, **changes}, unknown=self.unknown)

    def to_record(self) -> Weights:
        """The Control Weights record: the fixed fields for older readers and the full map (unknown names too)."""
        return Weights(**{name: self[name] for name in LEGACY}, factors={**self.unknown, **self})


DEFAULT_WEIGHTS = FactorWeights()


def as_factor_weights(weights: Mapping[str, float] | Weights) -> FactorWeights:
    """Any weights a caller holds as FactorWeights (a no-op for the router's, resolved once per control record)."""
    if isinstance(weights, FactorWeights):
        return weights
    if isinstance(weights, Weights):
        return FactorWeights.of(weights)
    return FactorWeights(weights)


def markdown_table() -> str:
    """The factors table of docs/architecture.md (a unit test keeps the doc equal to it)."""
    rows = ["| factor | default weight | value (0..1) |", "|---|---|---|"]
    rows += [f"| `{f.name}` | {f.default:g} | {f.meaning} |" for f in FACTORS]
    return "\n".join(rows)
