"""The pydantic models in reach.records mirror the .avsc files field by field."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta, timezone
from enum import StrEnum
from types import NoneType, UnionType
from typing import Annotated, Any, Union, get_args, get_origin

import pytest
from pydantic import BaseModel, ValidationError

from reach import records
from reach.kafka.codec import SCHEMA_ROOT
from reach.records import (
    TERMINAL,
    AgentState,
    AvroModel,
    AvroRecord,
    CapabilityMode,
    Control,
    ControlKind,
    InstanceAction,
    Status,
    StepStatus,
    Weights,
)

TOP_LEVEL: list[type[AvroRecord]] = [
    records.Envelope,
    records.Receipt,
    records.AgentRegistration,
    records.DeadLetter,
    records.Control,
    records.LoadReport,
    records.InstanceHealth,
    records.App,
    records.AuditEvent,
]
ENUMS: dict[str, type[StrEnum]] = {
    "ReceiptStatus": Status,
    "StepStatus": StepStatus,
    "CapabilityMode": CapabilityMode,
    "AgentState": AgentState,
    "ControlKind": ControlKind,
    "InstanceAction": InstanceAction,
    "CanaryState": records.CanaryState,
    "BreakerState": records.BreakerState,
    "AuditKind": records.AuditKind,
}
PRIMITIVES: dict[str, type] = {
    "string": str,
    "bytes": bytes,
    "int": int,
    "long": int,
    "float": float,
    "double": float,
    "boolean": bool,
}
ALL_MODELS = {
    cls.avro_name: cls
    for cls in vars(records).values()
    if isinstance(cls, type) and issubclass(cls, AvroModel) and cls not in (AvroModel, AvroRecord)
}


def _py_shape(annotation: Any) -> Any:
    """A comparable shape of a model field's annotation."""
    origin = get_origin(annotation)
    if origin is Annotated:
        return _py_shape(get_args(annotation)[0])
    if origin in (Union, UnionType):
        rest = [a for a in get_args(annotation) if a is not NoneType]
        assert len(rest) == 1, f"only `X | None` unions mirror Avro here, got {annotation}"
        return ("optional", _py_shape(rest[0]))
    if origin is list:
        return ("array", _py_shape(get_args(annotation)[0]))
    if origin is dict:
        key, value = get_args(annotation)
        assert key is str
        return ("map", _py_shape(value))
    if isinstance(annotation, type) and issubclass(annotation, StrEnum):
        return ("enum", annotation)
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return ("record", annotation)
    return annotation


class _Mirror:
    """Walks one .avsc, comparing every named type it defines with its pydantic or enum mirror."""

    def __init__(self) -> None:
        self.named: dict[str, Any] = {}
        self.seen_models: set[str] = set()

    def shape(self, avro: Any) -> Any:
        if isinstance(avro, str):
            return PRIMITIVES.get(avro) or self.named[avro]
        if isinstance(avro, list):
            rest = [b for b in avro if b != "null"]
            assert "null" in avro and len(rest) == 1, f"unions are `null | X`: {avro}"
            return ("optional", self.shape(rest[0]))
        kind = avro["type"]
        if kind == "record":
            return self.record(avro)
        if kind == "enum":
            enum = ENUMS[avro["name"]]
            assert [e.value for e in enum] == avro["symbols"], (
                f"{enum.__name__} symbols differ from the .avsc"
            )
            self.named[avro["name"]] = ("enum", enum)
            return ("enum", enum)
        if kind == "array":
            return ("array", self.shape(avro["items"]))
        if kind == "map":
            return ("map", self.shape(avro["values"]))
        return self.shape(kind)  # a primitive with a logicalType

    def record(self, avro: dict[str, Any]) -> Any:
        model = ALL_MODELS[avro["name"]]
        self.seen_models.add(avro["name"])
        self.named[avro["name"]] = ("record", model)
        fields = model.model_fields
        assert list(fields) == [f["name"] for f in avro["fields"]], f"{model.__name__}: field names or order"
        for af in avro["fields"]:
            pf = fields[af["name"]]
            where = f"{model.__name__}.{af['name']}"
            assert _py_shape(pf.annotation) == self.shape(af["type"]), f"{where}: type"
            assert pf.is_required() == ("default" not in af), f"{where}: required in one, defaulted in other"
            if "default" in af:
                assert _dump(pf.get_default(call_default_factory=True)) == af["default"], f"{where}: default"
        return ("record", model)


def _dump(value: Any) -> Any:
    if isinstance(value, BaseModel):
        return value.model_dump(mode="json")
    if isinstance(value, StrEnum):
        return value.value
    return value


@pytest.mark.parametrize("model", TOP_LEVEL, ids=lambda m: m.avro_name)
def test_model_mirrors_avsc(model: type[AvroRecord]) -> None:
    avsc = json.loads((SCHEMA_ROOT / f"{model.avro_name}.avsc").read_text())
    assert avsc["namespace"] == "reach.v1"
    assert _Mirror().shape(avsc) == ("record", model)


def test_every_model_has_a_schema() -> None:
    seen: set[str] = set()
    for model in TOP_LEVEL:
        mirror = _Mirror()
        mirror.shape(json.loads((SCHEMA_ROOT / f"{model.avro_name}.avsc").read_text()))
        seen |= mirror.seen_models
    assert seen == set(ALL_MODELS)
    assert {p.stem for p in SCHEMA_ROOT.glob("*.avsc")} == {m.avro_name for m in TOP_LEVEL}


def test_terminal_statuses_follow_the_design() -> None:
    assert {s for s in Status if s.is_terminal} == TERMINAL
    assert TERMINAL == {"COMPLETED", "FAILED", "REJECTED", "UNROUTABLE", "EXPIRED", "DEAD_LETTERED", "CANCELED"}
    assert not Status.RETRY_SCHEDULED.is_terminal


def test_timestamps_accept_datetimes_as_epoch_millis() -> None:
    at = datetime(2024, 5, 1, 12, 0, 0, 123000, tzinfo=UTC)
    elsewhere = at.astimezone(timezone(timedelta(hours=5)))
    expected = int(at.timestamp()) * 1000 + 123
    for value in (at, elsewhere, at.replace(tzinfo=None), expected):
        control = Control(kind=ControlKind.WEIGHTS, weights=Weights(), updated_at=value, updated_by="ops")
        assert control.updated_at == expected


def test_control_needs_the_body_of_its_kind() -> None:
    with pytest.raises(ValidationError, match="needs its `policy` field"):
        Control(kind=ControlKind.POLICY, weights=Weights(), updated_at=0, updated_by="ops")
    assert Control(
        kind="WEIGHTS", scope="search.web", weights=Weights(), updated_at=0, updated_by="x"
    ).key == ("WEIGHTS:search.web")


def test_records_are_frozen() -> None:
    weights = Weights()
    with pytest.raises(ValidationError):
        weights.fit = 1.0  # type: ignore[misc]
