"""The weight-change preview re-scores recorded decisions from their parts and counts the picks that move."""

from __future__ import annotations

from reach.core.factors import DEFAULT_WEIGHTS
from reach.core.preview import new_pick, preview, rescored
from reach.records import CandidateScore, Decision, Receipt, Status


def _candidate(instance: str, *, load: float, locality: float, multiplier: float = 1.0) -> CandidateScore:
    parts = {**{n: 0.0 for n in DEFAULT_WEIGHTS}, "fit": 1.0, "load": load, "locality": locality}
    score = sum(DEFAULT_WEIGHTS[n] * v for n, v in parts.items()) * multiplier
    return CandidateScore(instance_id=instance, agent_id="agent://a", score=score, fit=1.0, locality=locality,
                          load=load, affinity=0.0, parts=parts)


def _decision(picked: str, *candidates: CandidateScore) -> Decision:
    return Decision(candidates=list(candidates), picked_instance=picked, weights=dict(DEFAULT_WEIGHTS))


def _routed(decision: Decision, at: int, capability: str = "demo.echo") -> Receipt:
    return Receipt(message_id=f"m{at}", trace_id="t", tenant="acme", capability=capability, status=Status.ROUTED,
                   attempt=1, at=at, decision=decision)


# "near" is local but busy, "far" remote and idle: the default weights (locality 0.2, load 0.3) pick near
NEAR = _candidate("near", load=0.5, locality=1.0)
FAR = _candidate("far", load=1.0, locality=0.0)


def test_a_heavier_load_weight_moves_the_pick_and_the_defaults_keep_it() -> None:
    decision = _decision("near", NEAR, FAR)
    assert new_pick(decision, dict(DEFAULT_WEIGHTS)) is None
    assert new_pick(decision, {**DEFAULT_WEIGHTS, "load": 1.0, "locality": 0.0}) == "far"


def test_the_recorded_multiplier_is_kept_when_re_scoring() -> None:
    halved = _candidate("far", load=1.0, locality=0.0, multiplier=0.5)
    scores = rescored(_decision("near", NEAR, halved), {**DEFAULT_WEIGHTS, "load": 1.0, "locality": 0.0})
    assert abs(scores["far"] - 0.5 * (0.4 + 1.0)) < 1e-9 and abs(scores["near"] - (0.4 + 0.5)) < 1e-9


def test_a_pick_within_the_tie_band_of_the_new_best_is_not_counted_as_changed() -> None:
    close = _candidate("close", load=0.52, locality=1.0)
    assert new_pick(_decision("near", NEAR, close), {**DEFAULT_WEIGHTS, "load": 1.0}) is None


def test_preview_counts_moves_over_the_newest_sample_of_the_scope() -> None:
    receipts = [_routed(_decision("near", NEAR, FAR), at) for at in range(10)]
    receipts.append(_routed(_decision("near", NEAR, FAR), 99, capability="other"))
    receipts.append(Receipt(message_id="x", trace_id="t", tenant="acme", capability="demo.echo",
                            status=Status.COMPLETED, attempt=1, at=50))
    result = preview(receipts, {**DEFAULT_WEIGHTS, "load": 1.0, "locality": 0.0}, capability="demo.echo", limit=4)
    assert result.as_dict() == {"sampled": 4, "changed": 4, "moves": [{"from": "near", "to": "far", "count": 4}]}
    assert preview(receipts, dict(DEFAULT_WEIGHTS), capability=None, limit=100).as_dict()["sampled"] == 11
