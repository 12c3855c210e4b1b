"""The factor list: each factor's maths, the weights it derives (records, presets, docs), old and new readers."""

from __future__ import annotations

import json
import math
from io import BytesIO
from pathlib import Path

import fastavro
import pytest

from reach.core.candidates import RouteRequest, select
from reach.core.factors import (
    DEFAULT_WEIGHTS,
    FACTORS,
    LEGACY,
    NAMES,
    NEUTRAL_COST,
    PRESETS,
    FactorWeights,
    ScoringContext,
    as_factor_weights,
    markdown_table,
    preset,
    priority_match,
    relative_costs,
    success_rate,
)
from reach.core.loads import InstanceLoad
from reach.kafka import codec
from reach.records import AgentRegistration, Control, ControlKind, InstanceHealth, Weights
from tests.unit.routing_fixtures import reg

ROOT = Path(__file__).resolve().parents[3]
VALUES = {f.name: f.values for f in FACTORS}


def column(name: str, request: RouteRequest, *regs: AgentRegistration, context: ScoringContext | None = None,
           loads: dict[str, InstanceLoad] | None = None) -> list[float]:
    candidates = select(request, regs, loads=loads).candidates
    assert len(candidates) == len(regs)
    return VALUES[name](request, candidates, context or ScoringContext())


def req(**kw: object) -> RouteRequest:
    return RouteRequest(**{"message_id": "m", "capability": "text.echo", **kw})  # type: ignore[arg-type]


def health(instance_id: str, **fields: object) -> InstanceHealth:
    return InstanceHealth(instance_id=instance_id, agent_id="agent://echo/main", at=0, **fields)  # type: ignore[arg-type]


def test_the_list_keeps_the_published_defaults() -> None:
    assert {f.name: f.default for f in FACTORS} == {"fit": 0.4, "locality": 0.2, "load": 0.3, "affinity": 0.1,
                                                    "health": 0.0, "priority": 0.0, "cost": 0.0}
    assert LEGACY == ("fit", "locality", "load", "affinity") == NAMES[:4]
    assert dict(DEFAULT_WEIGHTS) == {f.name: f.default for f in FACTORS}


def test_fit_locality_load_affinity_keep_their_maths() -> None:
    r = req(region="eu", version_range="^1.2", tags=("fast",), session_key="s")
    regs = (reg("a", region="eu", version="1.2.0", tags=["fast"]),
            reg("b", region=None, version="1.3.0", tags=["fast"]),
            reg("c", region="us", version="1.2.0", tags=["fast"]))
    assert column("fit", r, *regs) == pytest.approx([1.0, 0.7 / 1.1 + 0.3, 1.0])
    assert column("locality", r, *regs) == [1.0, 0.5, 0.0]
    assert column("locality", req(), *regs) == [1.0, 1.0, 1.0]
    loads = {"a": InstanceLoad(2, 0, 10, 0), "b": InstanceLoad(0, 0, 10, 0), "c": InstanceLoad(5, 0, 10, 0)}
    assert column("load", r, *regs, loads=loads) == pytest.approx([0.8, 1.0, 0.5])
    assert column("affinity", r, *regs, context=ScoringContext(affinity={"s": "b"})) == [0.0, 1.0, 0.0]
    assert column("affinity", req(), *regs, context=ScoringContext(affinity={"s": "b"})) == [0.0, 0.0, 0.0]


def test_health_is_the_one_minute_success_rate_and_unknown_is_one() -> None:
    table = {"a": health("a", success_1m=0.75, calls_1m=40), "b": health("b"),  # no call in the minute
             "c": health("c", success_1m=float("nan")), "d": health("d", success_1m=1.5)}
    regs = [reg(i) for i in ("a", "b", "c", "d", "e")]
    assert column("health", req(), *regs, context=ScoringContext(health=table)) == [0.75, 1.0, 1.0, 1.0, 1.0]
    assert column("health", req(), *regs) == [1.0] * 5
    assert success_rate(None) == 1.0 and success_rate(health("x", success_1m=-1.0)) == 0.0


def test_priority_prefers_the_instance_class_closest_to_the_request() -> None:
    regs = [reg("standard"), reg("urgent").model_copy(update={"priority_class": 5}),
            reg("batch").model_copy(update={"priority_class": -1})]
    assert column("priority", req(priority=5), *regs) == pytest.approx([1 / 6, 1.0, 1 / 7])
    assert column("priority", req(), *regs) == pytest.approx([1.0, 1 / 6, 0.5])
    assert column("priority", req(priority=-1), *regs) == pytest.approx([0.5, 1 / 7, 1.0])
    assert priority_match(3, 3) == 1.0


def test_priority_comes_from_the_envelope() -> None:
    from reach.envelopes import new_envelope

    def read(**kw: object) -> RouteRequest:
        return RouteRequest.from_envelope(codec.decode_dict("Envelope", codec.encode(new_envelope("a.b", {}, **kw))))

    assert read(priority=7).priority == 7 and read().priority == 0


def test_cost_is_relative_among_the_candidates_and_undeclared_is_neutral() -> None:
    def costed(i: str, cost: float | None) -> AgentRegistration:
        return reg(i).model_copy(update={"cost": cost})

    assert column("cost", req(), costed("a", 1.0), costed("b", 3.0), costed("c", 2.0), costed("d", None)) == [
        1.0, 0.0, 0.5, NEUTRAL_COST]
    assert column("cost", req(), costed("a", 2.0), costed("b", 2.0)) == [NEUTRAL_COST] * 2  # nothing to prefer
    assert column("cost", req(), costed("a", 2.0), costed("b", None)) == [NEUTRAL_COST] * 2  # one price: no range
    assert column("cost", req(), costed("a", -1.0), costed("b", float("inf")), costed("c", 0.0)) == [NEUTRAL_COST] * 3
    assert relative_costs([]) == []


def test_every_factor_value_is_within_zero_and_one() -> None:
    regs = [reg("a", region="eu").model_copy(update={"cost": 0.0, "priority_class": 9}), reg("b", inflight=8)]
    context = ScoringContext(health={"a": health("a", success_1m=0.2)}, affinity={"s": "a"})
    r = req(region="us", session_key="s", priority=-3, version_range=">=0.1")
    for factor in FACTORS:
        values = column(factor.name, r, *regs, context=context)
        assert all(0.0 <= v <= 1.0 and math.isfinite(v) for v in values), (factor.name, values)


def test_a_record_resolves_map_first_then_fixed_fields_then_defaults() -> None:
    v2_style = FactorWeights.of(Weights(fit=0.9, load=0.0), scope="a.b")
    assert dict(v2_style) == {"fit": 0.9, "locality": 0.2, "load": 0.0, "affinity": 0.1, "health": 0.0,
                              "priority": 0.0, "cost": 0.0}
    assert v2_style.source("fit") == "a.b" and v2_style.source("cost") == "default"
    mapped = FactorWeights.of(Weights(fit=0.9, factors={"fit": 0.1, "cost": 0.5, "future": 2.0}), scope="*")
    assert mapped["fit"] == 0.1 and mapped["cost"] == 0.5 and mapped.source("cost") == "*"
    assert mapped.unknown == {"future": 2.0} and "future" not in mapped
    assert as_factor_weights(Weights()) == DEFAULT_WEIGHTS == as_factor_weights({})


def test_the_record_written_keeps_fixed_fields_for_old_readers_and_unknown_names() -> None:
    weights = FactorWeights({"cost": 0.7, "fit": 0.2}, unknown={"future": 1.0})
    record = weights.to_record()
    assert (record.fit, record.locality, record.load, record.affinity) == (0.2, 0.2, 0.3, 0.1)
    assert record.factors == {**dict(weights), "future": 1.0}
    assert FactorWeights.of(record) == weights and FactorWeights.of(record).unknown == {"future": 1.0}


def test_a_control_v2_record_without_the_map_still_scores() -> None:
    v2 = json.loads((ROOT / "schemas/avro/history/Control/2.avsc").read_text())
    body = {"kind": "WEIGHTS", "scope": "*", "weights": {"fit": 0.1, "locality": 0.0, "load": 0.9, "affinity": 0.0},
            "instance": None, "policy": None, "updated_at": 1, "updated_by": "old"}
    buf = BytesIO(b"\xc3\x01" + codec.fingerprint(v2))
    buf.seek(0, 2)
    fastavro.schemaless_writer(buf, fastavro.parse_schema(v2, named_schemas={}), body)
    control = codec.decode(buf.getvalue(), Control)
    assert control.kind is ControlKind.WEIGHTS and control.weights is not None and control.weights.factors == {}
    resolved = FactorWeights.of(control.weights, scope="*")
    assert dict(resolved) == {"fit": 0.1, "locality": 0.0, "load": 0.9, "affinity": 0.0, "health": 0.0,
                              "priority": 0.0, "cost": 0.0}


def test_an_old_reader_sees_the_fixed_fields_of_a_new_record() -> None:
    record = Control(kind=ControlKind.WEIGHTS, weights=FactorWeights({"load": 0.6, "cost": 0.4}).to_record(),
                     updated_at=1, updated_by="t")
    v2 = fastavro.parse_schema(json.loads((ROOT / "schemas/avro/history/Control/2.avsc").read_text()),
                               named_schemas={})
    current = fastavro.parse_schema(codec.default_codec().schema("Control"), named_schemas={})
    buf = BytesIO()
    fastavro.schemaless_writer(buf, current, record.to_avro())
    buf.seek(0)
    old = fastavro.schemaless_reader(buf, current, v2)
    assert old["weights"] == {"fit": 0.4, "locality": 0.2, "load": 0.6, "affinity": 0.1}  # type: ignore[index]


def test_presets_name_every_factor() -> None:
    assert set(PRESETS) == {"default", "priority-health", "cost-aware"}
    assert preset("cost-aware") == {"fit": 0.25, "locality": 0.1, "load": 0.25, "affinity": 0.1, "health": 0.1,
                                    "priority": 0.0, "cost": 0.2}
    assert preset("priority-health") == {"fit": 0.0, "locality": 0.1, "load": 0.2, "affinity": 0.0, "health": 0.3,
                                         "priority": 0.4, "cost": 0.0}
    assert preset("default") == dict(DEFAULT_WEIGHTS)
    with pytest.raises(KeyError):
        preset("nope")


def test_the_docs_table_is_the_factor_list() -> None:
    text = (ROOT / "docs/architecture.md").read_text()
    assert markdown_table() in text, "paste reach.core.factors.markdown_table() into docs/architecture.md (Scoring)"
    for name in NAMES:
        assert f"| `{name}` |" in markdown_table()
