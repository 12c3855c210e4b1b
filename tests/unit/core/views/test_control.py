"""The control view: scoping, overrides, and weights that cannot score (NaN, inf, negative) never apply."""

from __future__ import annotations

import math

import pytest

from reach.control import apply_record
from reach.core.views.controlview import DEFAULT_WEIGHTS, ControlView, weights_problem
from reach.kafka.codec import encode_dict
from reach.ops.weights import BadWeights, merged
from reach.records import Control, ControlKind, InstanceAction, InstanceOverride, Weights


def weights(scope: str, **w: float) -> Control:
    return Control(kind=ControlKind.WEIGHTS, scope=scope, weights=Weights(**w), updated_at=1, updated_by="t")


def test_capability_weights_win_over_star_and_star_over_defaults() -> None:
    view = ControlView()
    assert view.weights("a.b") == DEFAULT_WEIGHTS
    view.apply("WEIGHTS:*", weights("*", fit=1))
    assert view.weights("a.b")["fit"] == 1
    view.apply("WEIGHTS:a.b", weights("a.b", fit=2))
    assert view.weights("a.b")["fit"] == 2 and view.weights("c.d")["fit"] == 1
    view.apply("WEIGHTS:a.b", None)
    assert view.weights("a.b")["fit"] == 1


@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf, -0.1])
def test_weights_that_cannot_score_count_as_absent(bad: float) -> None:
    view = ControlView()
    view.apply("WEIGHTS:*", weights("*", fit=1))
    assert view.apply("WEIGHTS:a.b", weights("a.b", load=bad)) is False
    assert view.weights("a.b")["fit"] == 1, "the wider scope applies"
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
    assert view.weights("x")["fit"] == 3


@pytest.mark.parametrize("bad", [{"load": math.nan}, {"fit": math.inf}, {"affinity": -1.0},
                                 {"fit": 0.0, "locality": 0.0, "load": 0.0, "affinity": 0.0}])
def test_the_cli_refuses_weights_that_cannot_score(bad: dict[str, float]) -> None:
    with pytest.raises(BadWeights, match="finite|>= 0"):
        merged(DEFAULT_WEIGHTS, bad)
    assert merged(DEFAULT_WEIGHTS, {"load": 0.5, "fit": None})["load"] == 0.5


def test_the_cli_applies_a_preset_then_the_factors_given() -> None:
    new = merged(DEFAULT_WEIGHTS, {"cost": 0.5}, preset_name="priority-health")
    assert dict(new) == {"fit": 0.0, "locality": 0.1, "load": 0.2, "affinity": 0.0, "health": 0.3,
                         "priority": 0.4, "cost": 0.5}
    with pytest.raises(BadWeights, match="no weights preset 'nope'. Use one of: default, priority-health"):
        merged(DEFAULT_WEIGHTS, {}, preset_name="nope")


def test_weights_resolve_once_with_their_source_and_unknown_factors_are_kept_and_counted(
        caplog: pytest.LogCaptureFixture) -> None:
    view = ControlView()
    star = Control(kind=ControlKind.WEIGHTS, scope="*", updated_at=1, updated_by="t",
                   weights=Weights(factors={"cost": 0.6, "future": 1.0}))
    assert view.apply("WEIGHTS:*", star) and view.apply("WEIGHTS:*", star)
    resolved = view.weights("a.b")
    assert resolved["cost"] == 0.6 and resolved.source("cost") == "*" and resolved.source("health") == "default"
    assert resolved.source("fit") == "*"  # the fixed field of the record
    assert resolved.unknown == {"future": 1.0} and "future" not in dict(resolved)
    assert view.unknown_factors == 2
    assert sum("future" in r.getMessage() for r in caplog.records) == 1, "logged once per name"


def test_weights_problem_validates_the_whole_map() -> None:
    assert weights_problem(Weights(factors={"cost": math.nan})) is not None
    assert weights_problem(Weights(factors={"future": -1.0})) is not None
    only_unknown = {name: 0.0 for name in DEFAULT_WEIGHTS} | {"future": 1.0}
    assert "not all zero" in (weights_problem(only_unknown) or "")
    assert weights_problem({"cost": 1.0, "fit": 0, "locality": 0, "load": 0, "affinity": 0}) is None
