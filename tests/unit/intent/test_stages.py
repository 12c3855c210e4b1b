"""The resolver's stages, pure: exact map, thresholds, dual dispatch only without side effects, handoff."""

from __future__ import annotations

from reach.intent.semantic import Match
from reach.intent.stages import Mapping_, Thresholds, resolve

TH = Thresholds(upper=0.4, lower=0.25, margin=0.06, exact_floor=0.5)
LIVE = frozenset({"weather.forecast", "text.translate", "travel.flight-booking"})
SEF = frozenset({"weather.forecast", "text.translate"})


def ranked(*pairs: tuple[str, float]) -> object:
    return lambda _text: [Match(c, s, f"text of {c}") for c, s in pairs]


def run(intent: str, rank: object, exact: dict[str, Mapping_] | None = None) -> object:
    return resolve(intent, exact=exact or {}, live=LIVE, side_effect_free=SEF, rank=rank,  # type: ignore[arg-type]
                   thresholds=TH)


def test_an_exact_phrase_resolves_in_one_hop_whatever_its_case_and_spacing() -> None:
    res = run("  Weather   Forecast? ", None, {"weather forecast": Mapping_("weather.forecast")})
    assert res.stage == "exact" and res.capability == "weather.forecast"  # type: ignore[attr-defined]


def test_a_low_confidence_or_unserved_mapping_falls_through_with_its_reason() -> None:
    res = run("weather", ranked(("weather.forecast", 0.9)), {"weather": Mapping_("weather.forecast", 0.2)})
    assert res.stage == "semantic"  # type: ignore[attr-defined]
    assert "below the floor" in (res.candidates[0].reason or "")  # type: ignore[attr-defined]
    gone = run("x", ranked(("weather.forecast", 0.1)), {"x": Mapping_("nobody.serves")})
    assert gone.stage == "handoff" and gone.candidates[0].reason == "no live instance serves it"  # type: ignore


def test_thresholds_decide_semantic_dual_and_handoff() -> None:
    assert run("a", ranked(("travel.flight-booking", 0.45), ("weather.forecast", 0.44))).stage == "semantic"  # type: ignore
    clear_lead = run("a", ranked(("travel.flight-booking", 0.33), ("weather.forecast", 0.2)))
    assert clear_lead.stage == "semantic"  # type: ignore[attr-defined]
    dual = run("a", ranked(("text.translate", 0.33), ("weather.forecast", 0.30)))
    assert dual.stage == "dual" and dual.dual == ("text.translate", "weather.forecast")  # type: ignore
    side_effects = run("a", ranked(("travel.flight-booking", 0.33), ("weather.forecast", 0.30)))
    assert side_effects.stage == "handoff"  # type: ignore[attr-defined]
    assert all("side effects" in (c.reason or "") for c in side_effects.candidates)  # type: ignore
    low = run("a", ranked(("weather.forecast", 0.2)))
    assert low.stage == "handoff" and "below" in low.note  # type: ignore[attr-defined]


def test_without_the_model_only_the_exact_map_and_handoff_remain() -> None:
    res = resolve("rain?", exact={}, live=LIVE, side_effect_free=SEF, rank=None, thresholds=TH,
                  unavailable="IntentModelMissing: not installed")
    assert res.stage == "handoff" and "IntentModelMissing" in res.note
