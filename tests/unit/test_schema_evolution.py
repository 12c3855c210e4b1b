"""The records' evolution rule (docs/records.md "Evolution"), checked against every schema a record ever had.

tests/unit/kafka/test_codec.py checks FULL_TRANSITIVE compatibility across the released history in
schemas/avro/history/. This test also covers what the released history can miss: a schema that ran on main
without being released, and a release edited in place afterwards. Its versions are the snapshots of every
schema in the git history of schemas/avro/ (tests/unit/schemas_history/, made by scripts/schema_history.py),
the released history and today's .avsc, for whatever records exist. For each record and each version:
- today's reader reads data written by that version (every union branch and enum symbol, see _covering_data),
  and a field both schemas type alike keeps its value, a field the writer lacks reads as today's default;
- that version's reader reads data written by today's schema (a reader from before enum defaults, Receipt v1-v2
  and Control v1, in the symbols it knows: the one exception the rule allows).
"""

from __future__ import annotations

import json
from io import BytesIO
from pathlib import Path
from typing import Any

import fastavro
import pytest

from tests.unit.kafka.test_codec import _covering_data, _writable_for

SCHEMAS = Path(__file__).resolve().parents[2] / "schemas" / "avro"
SNAPSHOTS = Path(__file__).resolve().parent / "schemas_history"
NAMES = sorted(p.stem for p in SCHEMAS.glob("*.avsc"))
PRIMITIVES = {"null", "boolean", "int", "long", "float", "double", "bytes", "string"}


def _without_docs(node: Any) -> Any:
    if isinstance(node, dict):
        return {k: _without_docs(v) for k, v in node.items() if k != "doc"}
    if isinstance(node, list):
        return [_without_docs(v) for v in node]
    return node


def versions(name: str) -> list[tuple[str, dict[str, Any]]]:
    """Every distinct schema of `name` (docs aside) with where it came from: snapshots, released history."""
    found: dict[str, tuple[str, dict[str, Any]]] = {}
    files = [*sorted((SNAPSHOTS / name).glob("*.avsc")), *sorted((SCHEMAS / "history" / name).glob("*.avsc"))]
    for path in files:
        schema = json.loads(path.read_text())
        found.setdefault(json.dumps(_without_docs(schema), sort_keys=True), (str(path.relative_to(SCHEMAS.parents[1])),
                                                                            schema))
    return list(found.values())


def _plain(node: Any) -> bool:
    """A type whose value reads back unchanged under any compatible reader: primitives, unions, arrays and maps
    of them (named types may differ between versions, enums may read as their default, logical types convert)."""
    if isinstance(node, str):
        return node in PRIMITIVES
    if isinstance(node, list):
        return all(_plain(n) for n in node)
    if "logicalType" in node:
        return False
    if node["type"] == "array":
        return _plain(node["items"])
    if node["type"] == "map":
        return _plain(node["values"])
    return isinstance(node["type"], str) and node["type"] in PRIMITIVES


def _read(writer: dict[str, Any], reader: dict[str, Any], datum: dict[str, Any]) -> dict[str, Any]:
    parsed_writer = fastavro.parse_schema(writer, named_schemas={})
    buf = BytesIO()
    fastavro.schemaless_writer(buf, parsed_writer, datum)
    buf.seek(0)
    read = fastavro.schemaless_reader(buf, parsed_writer, fastavro.parse_schema(reader, named_schemas={}))
    assert isinstance(read, dict) and buf.read() == b"", "the reader consumed exactly the writer's bytes"
    return read


def _assert_reads(writer: dict[str, Any], reader: dict[str, Any], data: list[dict[str, Any]]) -> None:
    written = {f["name"]: f for f in writer["fields"]}
    for datum in data:
        read = _read(writer, reader, datum)
        assert set(read) == {f["name"] for f in reader["fields"]}
        for field in reader["fields"]:
            name, ftype = field["name"], _without_docs(field["type"])
            if name in written and _plain(ftype) and _without_docs(written[name]["type"]) == ftype:
                assert read[name] == datum[name], f"{name} changed value between writer and reader"
            elif name not in written and _plain(ftype):
                assert read[name] == field["default"], f"{name}, new to the reader, did not read as its default"


@pytest.mark.parametrize("name", NAMES)
def test_every_historical_schema_is_known(name: str) -> None:
    assert (SNAPSHOTS / name).is_dir() or (SCHEMAS / "history" / name).is_dir(), \
        f"no history of {name}: run scripts/schema_history.py (and release it under schemas/avro/history/{name}/)"


@pytest.mark.parametrize("name", NAMES)
def test_todays_reader_reads_every_historical_writer(name: str) -> None:
    today = json.loads((SCHEMAS / f"{name}.avsc").read_text())
    for source, old in versions(name):
        try:
            _assert_reads(old, today, _covering_data(old))
        except Exception as exc:  # noqa: BLE001 - name the version that broke the rule
            raise AssertionError(f"today's {name} cannot read data written by {source}: {exc}") from exc


@pytest.mark.parametrize("name", NAMES)
def test_every_historical_reader_reads_todays_writer(name: str) -> None:
    today = json.loads((SCHEMAS / f"{name}.avsc").read_text())
    for source, old in versions(name):
        try:
            _assert_reads(today, old, _covering_data(_writable_for(today, old)))
        except Exception as exc:  # noqa: BLE001 - name the version that broke the rule
            raise AssertionError(f"{source} cannot read data written by today's {name}: {exc}") from exc


def test_the_check_catches_a_breaking_change(tmp_path: Path) -> None:
    """A field added without a default, or a field whose type changes, breaks the rule in one direction."""
    today = json.loads((SCHEMAS / "Receipt.avsc").read_text())
    required = json.loads(json.dumps(today))
    required["fields"].append({"name": "region", "type": "string"})
    retyped = json.loads(json.dumps(today))
    next(f for f in retyped["fields"] if f["name"] == "message_id")["type"] = "long"
    with pytest.raises(fastavro.read.SchemaResolutionError):
        _assert_reads(today, required, _covering_data(today))  # a new reader: no default for what old data lacks
    with pytest.raises((fastavro.read.SchemaResolutionError, TypeError, ValueError)):
        _assert_reads(today, retyped, _covering_data(today))
