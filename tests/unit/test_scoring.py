"""Scoring is a pure function: deterministic apart from tie jitter, and weights steer the pick."""

from __future__ import annotations

import random
from collections import Counter

import pytest

from reach.candidates import RouteRequest, select
from reach.loads import InstanceLoad
from reach.records import Weights
from reach.scoring import TIE_BAND, score, version_closeness
from tests.unit.routing_fixtures import reg

W = Weights()


def req(**kw: object) -> RouteRequest:
    base: dict[str, object] = {"message_id": "m1", "capability": "text.echo"}
    base.update(kw)
    return RouteRequest(**base)  # type: ignore[arg-type]


def cands(request: RouteRequest, *regs: object) -> tuple:  # type: ignore[type-arg]
    return select(request, regs).candidates  # type: ignore[arg-type]


def test_formula_and_determinism() -> None:
    r = req(region="eu")
    cs = cands(r, reg("a", region="eu", inflight=2), reg("b", region="us", inflight=7))
    first = score(r, cs, W, {}, random.Random(1))
    again = score(r, cs, W, {}, random.Random(99))
    assert first.scores == again.scores and first.picked_instance == again.picked_instance == "a"
    a = first.scores[0]
    assert a.fit == pytest.approx(1.0) and a.locality == 1.0 and a.load == pytest.approx(0.8)
    assert a.score == pytest.approx(0.4 * 1.0 + 0.2 * 1.0 + 0.3 * 0.8 + 0.1 * 0.0)
    b = first.scores[1]
    assert b.score == pytest.approx(0.4 + 0.0 + 0.3 * 0.3)
    assert first.reason == "best"


def test_tie_jitter_spreads_within_band() -> None:
    r = req()
    cs = cands(r, reg("a", inflight=0, max_concurrency=100), reg("b", inflight=10, max_concurrency=100),
               reg("far", inflight=80, max_concurrency=100))
    rng = random.Random(7)
    picks = Counter(score(r, cs, W, {}, rng).picked_instance for _ in range(2000))
    assert picks["far"] == 0  # 0.3 * 0.8 = 0.24 below the best: outside the band
    assert picks["a"] > 800 and picks["b"] > 800
    scores = score(r, cs, W, {}, rng).scores
    assert scores[0].score - scores[1].score <= TIE_BAND


def test_weights_change_the_pick() -> None:
    r = req(region="us")
    cs = cands(r, reg("near", region="us", inflight=2), reg("idle", region="eu", inflight=0))
    assert score(r, cs, W, {}, random.Random(0)).picked_instance == "near"
    load_only = Weights(fit=0.0, locality=0.0, load=1.0, affinity=0.0)
    assert score(r, cs, load_only, {}, random.Random(0)).picked_instance == "idle"


def test_the_load_term_counts_the_queue_against_everything_an_instance_takes() -> None:
    r = req()
    regs = [reg("short", max_concurrency=8, max_queue=0), reg("deep", max_concurrency=8, max_queue=32)]
    loads = {"short": InstanceLoad(4, 0, 8, 0), "deep": InstanceLoad(8, 12, 8, 32)}
    cs = select(r, regs, loads=loads).candidates
    by = {s.instance_id: s.load for s in score(r, cs, W, {}, random.Random(0)).scores}
    assert by["short"] == pytest.approx(1 - 4 / 8) and by["deep"] == pytest.approx(1 - 20 / 40)


def test_capability_fit_prefers_closest_version_and_tags() -> None:
    r = req(version_range="^1.2", tags=("fast",))
    cs = cands(r, reg("exact", version="1.2.0"), reg("newer", version="1.9.0"))
    decision = score(r, cs, Weights(fit=1, locality=0, load=0, affinity=0), {}, random.Random(0))
    fits = {s.instance_id: s.fit for s in decision.scores}
    assert fits["exact"] > fits["newer"]
    assert version_closeness("1.2.0", "^1.2") == 1.0 and version_closeness("1.3.0", "^1.2") < 1.0
    tagged = cands(r, reg("t", tags=["fast"]), reg("u", tags=["slow"]))
    # a full tag match is preferred by the filter; among partial matches the fit tells them apart
    assert [c.instance_id for c in tagged] == ["t"]


def test_affinity_keeps_the_session_while_healthy() -> None:
    r = req(session_key="s1")
    cs = cands(r, reg("a", inflight=5), reg("b", inflight=0))
    decision = score(r, cs, W, {"s1": "a"}, random.Random(0))
    assert decision.picked_instance == "a" and decision.reason == "affinity"
    assert {s.instance_id: s.affinity for s in decision.scores} == {"a": 1.0, "b": 0.0}
    off = Weights(affinity=0.0)
    assert score(r, cs, off, {"s1": "a"}, random.Random(0)).picked_instance == "b"
    only_b = cands(r, reg("b"))
    assert score(r, only_b, W, {"s1": "a"}, random.Random(0)).picked_instance == "b"


def test_empty_candidates_is_a_programming_error() -> None:
    with pytest.raises(ValueError):
        score(req(), (), W, {}, random.Random(0))
