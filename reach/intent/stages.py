"""The resolver's decision, pure: exact map, semantic top-k with thresholds, fuzzy merge, dual dispatch, handoff.

- exact: the normalised intent is a mapping whose confidence is at least `exact_floor` and whose
  capability has a live instance;
- semantic: the best match scores at least `upper`, or at least `lower` and ahead of the second by
  `margin`;
- fuzzy: no confident match, but the best `fuzzy_top` all score at least `fuzzy_floor` and belong to one
  family (the capability name's first segment: `support.billing` is in `support`) whose generic capability
  (tagged `generic`, e.g. `support.general`) a live instance serves: the request merges into the generic
  one, which serves the family's requests nobody placed more precisely (docs/decisions/0022);
- dual: the best two both score at least `lower`, neither clears the rule above, and both declare
  themselves free of side effects: both run as child messages, the first valid answer wins;
- handoff: anything else (a human takes it from `<ns>.handoff`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Literal

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict

from reach.intent.semantic import Match
from reach.intent.text import family, normalize

Stage = Literal["exact", "semantic", "fuzzy", "dual", "handoff"]
STAGES: tuple[Stage, ...] = ("exact", "semantic", "fuzzy", "dual", "handoff")


class Thresholds(BaseSettings):
    """The stages' thresholds (env REACH_INTENT_UPPER, _LOWER, _MARGIN, _EXACT_FLOOR, measured on the sample
    catalog in docs/decisions/0019-intent-model.md; _FUZZY, _FUZZY_FLOOR, _FUZZY_TOP in 0022)."""

    model_config = SettingsConfigDict(env_prefix="REACH_INTENT_", frozen=True)

    upper: float = 0.40
    lower: float = 0.25
    margin: float = 0.06
    exact_floor: float = 0.5
    fuzzy: bool = True  # the fuzzy merge into a family's generic capability
    fuzzy_floor: float = 0.20
    fuzzy_top: int = Field(default=2, ge=1, le=5)  # of the top 5 ranked


@dataclass(frozen=True)
class Candidate:
    """One capability considered, with its score, what matched and why it was not taken (None if taken)."""

    capability: str
    score: float
    source: str
    reason: str | None = None


@dataclass(frozen=True)
class Mapping_:
    """An exact mapping as the resolver reads it."""

    capability: str
    confidence: float = 1.0


@dataclass(frozen=True)
class Resolution:
    """What the resolver decided for one intent."""

    stage: Stage
    intent: str
    capability: str | None = None
    candidates: tuple[Candidate, ...] = ()
    dual: tuple[str, str] | None = None
    note: str = ""
    extra: dict[str, str] = field(default_factory=dict)


def resolve(
    intent: str,
    *,
    exact: Mapping[str, Mapping_],
    live: frozenset[str],
    side_effect_free: frozenset[str],
    rank: Callable[[str], list[Match]] | None,
    thresholds: Thresholds,
    unavailable: str = "",
    generics: Mapping[str, str] | None = None,
    families: Mapping[str, str] | None = None,
) -> Resolution:
    """Decide one intent. `rank` is None when the semantic stage cannot run (`unavailable` says why);
    `generics` maps a family to its generic capability (reach.intent.catalog.generics), `families` a capability
    to its family (reach.intent.catalog.families; by default its name's first segment)."""
    phrase = normalize(intent)
    considered: list[Candidate] = []
    mapping = exact.get(phrase)
    if mapping is not None:
        if mapping.confidence >= thresholds.exact_floor and mapping.capability in live:
            return Resolution("exact", intent, mapping.capability,
                              (Candidate(mapping.capability, mapping.confidence, "exact"),))
        why = (f"confidence {mapping.confidence:.2f} is below the floor {thresholds.exact_floor:.2f}"
               if mapping.confidence < thresholds.exact_floor else "no live instance serves it")
        considered.append(Candidate(mapping.capability, mapping.confidence, "exact", why))
    if rank is None:
        return Resolution("handoff", intent, None, tuple(considered),
                          note=f"no exact mapping and the semantic stage is unavailable: {unavailable}")
    matches = [m for m in rank(intent) if m.capability in live]
    if not matches:
        return Resolution("handoff", intent, None, tuple(considered), note="no capability is served")
    best = matches[0]
    second = matches[1] if len(matches) > 1 else None
    gap = best.score - (second.score if second else 0.0)
    if best.score >= thresholds.upper or (best.score >= thresholds.lower and gap >= thresholds.margin):
        return Resolution("semantic", intent, best.capability,
                          (*considered, *_candidates(matches, taken={best.capability}, why="a better match won")))
    merged = _fuzzy(intent, matches, considered, thresholds, generics or {}, families or {}, live)
    if merged is not None:
        return merged
    if best.score < thresholds.lower:
        return Resolution("handoff", intent, None,
                          (*considered, *_candidates(matches, taken=set(),
                                                     why=f"below the lower threshold {thresholds.lower:.2f}")),
                          note=f"the best match scores {best.score:.3f}, below {thresholds.lower:.2f}")
    if second is not None and second.score >= thresholds.lower and \
            {best.capability, second.capability} <= side_effect_free:
        pair = (best.capability, second.capability)
        return Resolution("dual", intent, best.capability,
                          (*considered, *_candidates(matches, taken=set(pair), why="not among the best two")),
                          dual=pair)
    why = ("low confidence and not both free of side effects" if second is not None and
           second.score >= thresholds.lower else "low confidence")
    return Resolution("handoff", intent, None, (*considered, *_candidates(matches, taken=set(), why=why)),
                      note=f"the best match scores {best.score:.3f} (between {thresholds.lower:.2f} and "
                           f"{thresholds.upper:.2f}) only {gap:.3f} ahead of the next: {why}")


def _fuzzy(intent: str, matches: list[Match], considered: list[Candidate], thresholds: Thresholds,
           generics: Mapping[str, str], families: Mapping[str, str], live: frozenset[str]) -> Resolution | None:
    """The fuzzy merge: the best `fuzzy_top` all clear `fuzzy_floor` and share a family with a served generic."""
    top = matches[:thresholds.fuzzy_top]
    if not thresholds.fuzzy or len(top) < thresholds.fuzzy_top or top[-1].score < thresholds.fuzzy_floor:
        return None

    def family_of(capability: str) -> str:
        return families.get(capability) or family(capability)

    shared = {family_of(m.capability) for m in top}
    generic = generics.get(next(iter(shared))) if len(shared) == 1 else None
    if generic is None or generic not in live:
        return None
    names = ", ".join(f"{m.capability} {m.score:.3f}" for m in top)
    return Resolution("fuzzy", intent, generic,
                      (*considered, *_candidates(matches, taken={generic},
                                                 why=f"not confident: merged into the family's generic {generic}")),
                      note=f"the best {len(top)} ({names}) are all of family {next(iter(shared))} and score at least "
                           f"{thresholds.fuzzy_floor:.2f}: merged into its generic capability {generic}")


def _candidates(matches: list[Match], *, taken: set[str], why: str) -> list[Candidate]:
    return [Candidate(m.capability, round(m.score, 4), m.text, None if m.capability in taken else why)
            for m in matches]
