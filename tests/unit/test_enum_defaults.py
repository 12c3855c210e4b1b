"""Enum defaults: a symbol from a newer writer reads as UNKNOWN, and the status fold and control view cope."""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from functools import reduce
from io import BytesIO
from pathlib import Path
from typing import Any

import fastavro

from reach.control import DEFAULT_WEIGHTS, ControlView, instance_record
from reach.core.lifecycle import StatusRow, fold
from reach.kafka import codec
from reach.kafka.codec import MARKER, SCHEMA_ROOT, Codec
from reach.records import Control, ControlKind, InstanceAction, Receipt, Status, StepStatus, Weights

NOW = 1_714_564_800_123


def _enum(schema: dict[str, Any], field: str) -> dict[str, Any]:
    node = next(f for f in schema["fields"] if f["name"] == field)["type"]
    node = next(b for b in node if b != "null") if isinstance(node, list) else node
    return node if node["type"] == "enum" else _enum(node, "action")


def _future(name: str, grow: Callable[[dict[str, Any]], None], tmp_path: Path) -> tuple[dict[str, Any], Codec]:
    """A schema from a later release than this reader (`grow` adds its symbols), and a reader whose
    history holds it, as a reader does once that release is copied in."""
    newer = json.loads((SCHEMA_ROOT / f"{name}.avsc").read_text())
    grow(newer)
    shutil.copytree(SCHEMA_ROOT, tmp_path, dirs_exist_ok=True)
    (tmp_path / "history" / name / "99.avsc").write_text(json.dumps(newer))
    return newer, Codec(tmp_path)


def _written_with(schema: dict[str, Any], datum: dict[str, Any]) -> bytes:
    buf = BytesIO()
    fastavro.schemaless_writer(buf, fastavro.parse_schema(schema, named_schemas={}), datum)
    return MARKER + codec.fingerprint(schema) + buf.getvalue()


def _receipt(status: str, at: int, **fields: Any) -> dict[str, Any]:
    base = Receipt(message_id="m1", trace_id="t1", tenant="acme", capability="demo.echo", status=Status.ACCEPTED, at=at)
    return {**base.to_avro(), "status": status, **fields}


def test_a_status_from_a_newer_writer_reads_as_a_non_terminal_unknown(tmp_path: Path) -> None:
    def grow(schema: dict[str, Any]) -> None:
        _enum(schema, "status")["symbols"].insert(5, "PAUSED")  # position is irrelevant: enums resolve by name
        _enum(schema, "step_status")["symbols"].append("partial")

    newer, reader = _future("Receipt", grow, tmp_path)
    read = reader.decode(_written_with(newer, _receipt("PAUSED", NOW, step_status="partial")), Receipt)
    assert read.status is Status.UNKNOWN and not read.status.is_terminal
    assert read.step_status is StepStatus.UNKNOWN
    # A symbol both sides know still resolves by name, whatever its position in the newer enum.
    assert reader.decode(_written_with(newer, _receipt("FAILED", NOW)), Receipt).status is Status.FAILED


def _row(*receipts: Receipt) -> StatusRow:
    row = reduce(fold, receipts, None)
    assert row is not None
    return row


def _r(status: Status, at: int, **fields: Any) -> Receipt:
    return Receipt.from_avro(_receipt(status.value, at, **fields))


def test_the_fold_keeps_an_unknown_step_in_the_timeline_without_moving_the_row() -> None:
    routed = _r(Status.ROUTED, 1, instance_id="i1", delivery_timeout_ms=500)
    row = _row(routed, _r(Status.UNKNOWN, 2))
    assert row.status is Status.ROUTED and row.delivery_due_at == 501 and not row.terminal
    assert [s.status for s in row.timeline] == [Status.ROUTED, Status.UNKNOWN]
    done = _row(routed, _r(Status.UNKNOWN, 2), _r(Status.COMPLETED, 3), _r(Status.UNKNOWN, 4))
    assert done.status is Status.COMPLETED and done.terminal_at == 3
    assert [s.status for s in done.timeline][-1] is Status.UNKNOWN


def test_an_unknown_first_step_opens_a_non_terminal_row_the_next_step_advances() -> None:
    row = _row(_r(Status.UNKNOWN, 1))
    assert row.status is Status.UNKNOWN and not row.terminal
    assert _row(_r(Status.UNKNOWN, 1), _r(Status.STARTED, 2)).status is Status.STARTED


def _control(**fields: Any) -> dict[str, Any]:
    base = Control(kind=ControlKind.WEIGHTS, weights=Weights(), updated_at=NOW, updated_by="ops")
    return {**base.to_avro(), **fields}


def test_a_control_kind_from_a_newer_writer_is_skipped_and_counted(tmp_path: Path) -> None:
    newer, reader = _future("Control", lambda s: _enum(s, "kind")["symbols"].append("ROUTE_HINT"), tmp_path)
    read = reader.decode(_written_with(newer, _control(kind="ROUTE_HINT", scope="demo.echo", weights=None)), Control)
    assert read.kind is ControlKind.UNKNOWN and not read.understood
    assert read.key == "UNKNOWN:demo.echo"

    view = ControlView()
    view.apply("ROUTE_HINT:demo.echo", read)
    assert view.skipped == 1 and view.records() == {}
    assert view.weights("demo.echo") == DEFAULT_WEIGHTS


def test_an_instance_action_from_a_newer_writer_keeps_the_previous_override(tmp_path: Path) -> None:
    newer, reader = _future("Control", lambda s: _enum(s, "instance")["symbols"].append("QUARANTINE"), tmp_path)
    drain = instance_record("i-1", InstanceAction.DRAIN)
    unknown = reader.decode(
        _written_with(newer, {**drain.to_avro(), "instance": {"instance_id": "i-1", "action": "QUARANTINE"}}), Control
    )
    assert unknown.instance is not None and unknown.instance.action is InstanceAction.UNKNOWN

    view = ControlView()
    view.apply(drain.key, drain)
    view.apply(drain.key, unknown)
    assert view.skipped == 1
    assert view.disabled() == {"i-1"}, "an action this reader cannot read must not lift the drain"
