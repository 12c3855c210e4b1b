"""Scoring is a pure function: deterministic apart from tie jitter, weights steer the pick, declared and health
weights multiply the score."""

from __future__ import annotations

import random
from collections import Counter

import pytest

from reach.core.candidates import RouteRequest, select
from reach.core.factors import NAMES, ScoringContext, version_closeness
from reach.core.loads import InstanceLoad
from reach.core.scoring import TIE_BAND, score, score_all
from reach.records import InstanceHealth, Weights
from tests.unit.routing_fixtures import reg

W = Weights()
NONE = ScoringContext()


def aff(**sessions: str) -> ScoringContext:
    return ScoringContext(affinity=sessions)


def health(**weights: float) -> ScoringContext:
    return ScoringContext(health={i: InstanceHealth(instance_id=i, agent_id="agent://echo/main", at=0, weight=w)
                                  for i, w in weights.items()})


def req(**kw: object) -> RouteRequest:
    base: dict[str, object] = {"message_id": "m1", "capability": "text.echo"}
    base.update(kw)
    return RouteRequest(**base)  # type: ignore[arg-type]


def cands(request: RouteRequest, *regs: object) -> tuple:  # type: ignore[type-arg]
    return select(request, regs).candidates  # type: ignore[arg-type]


def test_formula_and_determinism() -> None:
    r = req(region="eu")
    cs = cands(r, reg("a", region="eu", inflight=2), reg("b", region="us", inflight=7))
    first = score(r, cs, W, NONE, random.Random(1))
    again = score(r, cs, W, NONE, random.Random(99))
    assert first.scores == again.scores and first.picked_instance == again.picked_instance == "a"
    a = first.scores[0]
    assert a.part("fit") == pytest.approx(1.0) and a.part("locality") == 1.0 and a.part("load") == pytest.approx(0.8)
    assert a.score == pytest.approx(0.4 * 1.0 + 0.2 * 1.0 + 0.3 * 0.8 + 0.1 * 0.0)
    b = first.scores[1]
    assert b.score == pytest.approx(0.4 + 0.0 + 0.3 * 0.3)
    assert first.reason == "best"


def test_tie_jitter_spreads_within_band() -> None:
    r = req()
    cs = cands(r, reg("a", inflight=0, max_concurrency=100), reg("b", inflight=10, max_concurrency=100),
               reg("far", inflight=80, max_concurrency=100))
    rng = random.Random(7)
    picks = Counter(score(r, cs, W, NONE, rng).picked_instance for _ in range(2000))
    assert picks["far"] == 0  # 0.3 * 0.8 = 0.24 below the best: outside the band
    assert picks["a"] > 800 and picks["b"] > 800
    scores = score(r, cs, W, NONE, rng).scores
    assert scores[0].score - scores[1].score <= TIE_BAND


def test_weights_change_the_pick() -> None:
    r = req(region="us")
    cs = cands(r, reg("near", region="us", inflight=2), reg("idle", region="eu", inflight=0))
    assert score(r, cs, W, NONE, random.Random(0)).picked_instance == "near"
    load_only = Weights(fit=0.0, locality=0.0, load=1.0, affinity=0.0)
    assert score(r, cs, load_only, NONE, random.Random(0)).picked_instance == "idle"


def test_the_load_term_counts_the_queue_against_everything_an_instance_takes() -> None:
    r = req()
    regs = [reg("short", max_concurrency=8, max_queue=0), reg("deep", max_concurrency=8, max_queue=32)]
    loads = {"short": InstanceLoad(4, 0, 8, 0), "deep": InstanceLoad(8, 12, 8, 32)}
    cs = select(r, regs, loads=loads).candidates
    by = {s.instance_id: s.part("load") for s in score(r, cs, W, NONE, random.Random(0)).scores}
    assert by["short"] == pytest.approx(1 - 4 / 8) and by["deep"] == pytest.approx(1 - 20 / 40)


def test_capability_fit_prefers_closest_version_and_tags() -> None:
    r = req(version_range="^1.2", tags=("fast",))
    cs = cands(r, reg("exact", version="1.2.0"), reg("newer", version="1.9.0"))
    decision = score(r, cs, Weights(fit=1, locality=0, load=0, affinity=0), NONE, random.Random(0))
    fits = {s.instance_id: s.part("fit") for s in decision.scores}
    assert fits["exact"] > fits["newer"]
    assert version_closeness("1.2.0", "^1.2") == 1.0 and version_closeness("1.3.0", "^1.2") < 1.0
    tagged = cands(r, reg("t", tags=["fast"]), reg("u", tags=["slow"]))
    # a full tag match is preferred by the filter; among partial matches the fit tells them apart
    assert [c.instance_id for c in tagged] == ["t"]


def test_affinity_keeps_the_session_while_healthy() -> None:
    r = req(session_key="s1")
    cs = cands(r, reg("a", inflight=5), reg("b", inflight=0))
    decision = score(r, cs, W, aff(s1="a"), random.Random(0))
    assert decision.picked_instance == "a" and decision.reason == "affinity"
    assert {s.instance_id: s.part("affinity") for s in decision.scores} == {"a": 1.0, "b": 0.0}
    off = Weights(affinity=0.0)
    assert score(r, cs, off, aff(s1="a"), random.Random(0)).picked_instance == "b"
    only_b = cands(r, reg("b"))
    assert score(r, only_b, W, aff(s1="a"), random.Random(0)).picked_instance == "b"


def test_empty_candidates_is_a_programming_error() -> None:
    with pytest.raises(ValueError):
        score(req(), (), W, NONE, random.Random(0))


def test_every_factor_is_recorded_also_at_weight_zero() -> None:
    r = req(region="eu")
    cs = cands(r, reg("a", region="eu"), reg("b"))
    decision = score(r, cs, W, NONE, random.Random(0))
    for s in decision.scores:
        assert tuple(s.parts_map()) == NAMES and s.part("health") == 1.0 and s.part("cost") == 0.5
        record = s.as_dict()
        assert record["parts"] == s.parts_map()
        assert (record["fit"], record["locality"], record["load"], record["affinity"]) == (
            s.part("fit"), s.part("locality"), s.part("load"), s.part("affinity"))
    assert decision.weights_dict() == {"fit": 0.4, "locality": 0.2, "load": 0.3, "affinity": 0.1,
                                       "health": 0.0, "priority": 0.0, "cost": 0.0}


def test_the_score_is_the_weighted_sum_of_the_parts_times_the_effective_weight() -> None:
    r = req()
    regs = [reg("a", inflight=5).model_copy(update={"weight": 0.5, "cost": 1.0}),
            reg("b", inflight=1).model_copy(update={"cost": 3.0})]
    cs = cands(r, *regs)
    weights = {"fit": 0.1, "load": 0.5, "cost": 0.4, "locality": 0.0, "affinity": 0.0}
    for s, m in zip(score(r, cs, weights, health(b=0.25), random.Random(0)).scores, (0.5, 0.25), strict=True):
        total = sum(weights.get(name, 0.0) * value for name, value in s.parts_map().items())
        assert s.score == pytest.approx(total * m)


def test_a_declared_weight_multiplies_the_score() -> None:
    r = req()
    cs = cands(r, reg("light", inflight=0).model_copy(update={"weight": 0.3}), reg("full", inflight=5))
    decision = score(r, cs, W, NONE, random.Random(0))
    by = {s.instance_id: s.score for s in decision.scores}
    assert by["light"] == pytest.approx(0.3 * (0.4 + 0.2 + 0.3 * 1.0))
    assert decision.picked_instance == "full"  # 0.4 + 0.2 + 0.3 * 0.5 = 0.75 > 0.27


def test_health_weight_multiplies_too_and_bad_weights_count_as_one() -> None:
    r = req()
    regs = [reg("a").model_copy(update={"weight": 2.0}), reg("b").model_copy(update={"weight": float("nan")})]
    by = {s.instance_id: s.score for s in score_all(r, cands(r, *regs), W, health(a=0.25, b=float("inf")))}
    base = 0.4 + 0.2 + 0.3
    assert by == {"a": pytest.approx(base * 2.0 * 0.25), "b": pytest.approx(base)}


def test_weight_zero_is_eligible_but_picked_only_when_nothing_else_is() -> None:
    r = req(session_key="s1")
    ejected = reg("ejected", inflight=0)
    busy = reg("busy", inflight=50, max_concurrency=100)
    cs = cands(r, ejected, busy)
    ctx = ScoringContext(health=health(ejected=0.0).health, affinity={"s1": "ejected"})
    rng = random.Random(3)
    assert {score(r, cs, W, ctx, rng).picked_instance for _ in range(50)} == {"busy"}  # the session moves too
    alone = cands(r, ejected)
    decision = score(r, alone, W, ctx, rng)
    assert decision.picked_instance == "ejected" and decision.scores[0].score == 0.0
    both_zero = score(r, cs, W, health(ejected=0.0, busy=0.0), rng)
    assert both_zero.picked_instance == "ejected" and both_zero.reason == "zero-weight"  # by the raw score


def test_arms_from_the_context_are_recorded() -> None:
    r = req()
    cs = cands(r, reg("a"), reg("b", inflight=50, max_concurrency=100))
    decision = score(r, cs, W, ScoringContext(arms={"a": "canary", "b": "stable"}), random.Random(0))
    assert [s.arm for s in decision.scores] == ["canary", "stable"] and decision.arm == "canary"
    assert score(r, cs, W, NONE, random.Random(0)).arm is None


def test_the_cost_aware_preset_prefers_the_cheaper_instance_until_it_fills() -> None:
    from reach.core.factors import preset

    def priced(i: str, cost: float, inflight: int) -> object:
        return reg(i, inflight=inflight, max_concurrency=10).model_copy(update={"cost": cost})

    cost_aware, default = preset("cost-aware"), preset("default")
    assert sum(cost_aware.values()) == pytest.approx(1.0)
    r = req()
    idle = cands(r, priced("cheap", 1.0, 0), priced("dear", 3.0, 0))
    picks = Counter(score(r, idle, cost_aware, NONE, random.Random(n)).picked_instance for n in range(200))
    assert picks == {"cheap": 200}, "both idle: the cheaper always"
    assert len(Counter(score(r, idle, default, NONE, random.Random(n)).picked_instance for n in range(200))) == 2, \
        "the default weighs cost 0: equal instances share the traffic"
    half = cands(r, priced("cheap", 1.0, 5), priced("dear", 3.0, 0))
    assert score(r, half, cost_aware, NONE, random.Random(1)).picked_instance == "cheap", "half full: still cheaper"
    full = cands(r, priced("cheap", 1.0, 9), priced("dear", 3.0, 0))
    assert score(r, full, cost_aware, NONE, random.Random(1)).picked_instance == "dear", "nearly full: spill over"
