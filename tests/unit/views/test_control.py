"""The control view: scoping, overrides, and weights that cannot score (NaN, inf, negative) never apply."""

from __future__ import annotations

import math

import pytest

from reach.cli.weights import BadWeights, merged
from reach.codec import encode_dict
from reach.control import apply_record
from reach.records import Control, ControlKind, InstanceAction, InstanceOverride, Weights
from reach.views.control import DEFAULT_WEIGHTS, ControlView, weights_problem


def weights(scope: str, **w: float) -> Control:
    return Control(kind=ControlKind.WEIGHTS, scope=scope, weights=Weights(**w), updated_at=1, updated_by="t")


def test_capability_weights_win_over_star_and_star_over_defaults() -> None:
    view = ControlView()
    assert view.weights("a.b") == DEFAULT_WEIGHTS
    view.apply("WEIGHTS:*", weights("*", fit=1))
    assert view.weights("a.b").fit == 1
    view.apply("WEIGHTS:a.b", weights("a.b", fit=2))
    assert view.weights("a.b").fit == 2 and view.weights("c.d").fit == 1
    view.apply("WEIGHTS:a.b", None)
    assert view.weights("a.b").fit == 1


@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf, -0.1])
def test_weights_that_cannot_score_count_as_absent(bad: float) -> None:
    view = ControlView()
    view.apply("WEIGHTS:*", weights("*", fit=1))
    assert view.apply("WEIGHTS:a.b", weights("a.b", load=bad)) is False
    assert view.weights("a.b").fit == 1, "the wider scope applies"
    assert view.refused == 1
    assert weights_problem(Weights(load=bad)) is not None


def test_all_zero_weights_are_refused() -> None:
    assert "not all zero" in (weights_problem(Weights(fit=0, locality=0, load=0, affinity=0)) or "")
    assert weights_problem(DEFAULT_WEIGHTS) is None


def test_drain_and_disable_keep_an_instance_out_until_enabled() -> None:
    view = ControlView()

    def instance(action: InstanceAction) -> Control:
        return Control(kind=ControlKind.INSTANCE, scope="i1", updated_at=1, updated_by="t",
                       instance=InstanceOverride(instance_id="i1", action=action))

    view.apply("INSTANCE:i1", instance(InstanceAction.DRAIN))
    assert view.disabled() == {"i1"}
    view.apply("INSTANCE:i1", instance(InstanceAction.ENABLE))
    assert view.disabled() == frozenset()


def test_a_valid_avro_record_the_model_refuses_is_skipped_and_counted() -> None:
    view = ControlView()
    raw = encode_dict("Control", {"kind": "WEIGHTS", "scope": "*", "weights": None, "instance": None,
                                  "policy": None, "updated_at": 1, "updated_by": "t"})
    assert apply_record(view, b"WEIGHTS:*", raw, where="test") is False
    assert apply_record(view, b"\xff\xfe", b"not avro", where="test") is False
    assert view.refused == 2 and view.records() == {}
    assert apply_record(view, b"WEIGHTS:*", encode_dict("Control", weights("*", fit=3).to_avro()), where="t")
    assert view.weights("x").fit == 3


@pytest.mark.parametrize("bad", [{"load": math.nan}, {"fit": math.inf}, {"affinity": -1.0},
                                 {"fit": 0.0, "locality": 0.0, "load": 0.0, "affinity": 0.0}])
def test_the_cli_refuses_weights_that_cannot_score(bad: dict[str, float]) -> None:
    with pytest.raises(BadWeights, match="finite|>= 0"):
        merged(DEFAULT_WEIGHTS, **bad)
    assert merged(DEFAULT_WEIGHTS, load=0.5, fit=None).load == 0.5
