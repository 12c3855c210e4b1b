"""Hypothesis strategies for the fuzz tests: valid Avro datums of a schema, the frames they make, and mutations."""

from __future__ import annotations

from functools import cache
from io import BytesIO
from typing import Any

import fastavro
from hypothesis import strategies as st

from reach.kafka.codec import MARKER, default_codec

_PRIMITIVES: dict[str, st.SearchStrategy[Any]] = {
    "null": st.none(),
    "boolean": st.booleans(),
    "int": st.integers(-(2**31), 2**31 - 1),
    "long": st.integers(-(2**63), 2**63 - 1),
    "float": st.floats(width=32),
    "double": st.floats(),
    "bytes": st.binary(max_size=64),
    "string": st.text(max_size=24),
}


def datums(schema: Any, named: dict[str, Any] | None = None) -> st.SearchStrategy[Any]:
    """Any datum `schema` can write (schemas here are not recursive, so this terminates)."""
    named = {} if named is None else named
    if isinstance(schema, str):
        return _PRIMITIVES[schema] if schema in _PRIMITIVES else datums(named[schema], named)
    if isinstance(schema, list):
        return st.one_of([datums(branch, named) for branch in schema])
    kind = schema["type"]
    if kind == "record":
        named[schema["name"]] = schema
        return st.fixed_dictionaries({f["name"]: datums(f["type"], named) for f in schema["fields"]})
    if kind == "enum":
        named[schema["name"]] = schema
        return st.sampled_from(schema["symbols"])
    if kind == "array":
        return st.lists(datums(schema["items"], named), max_size=3)
    if kind == "map":
        return st.dictionaries(st.text(max_size=8), datums(schema["values"], named), max_size=3)
    return datums(kind, named)  # a primitive with a logicalType


def frame(name: str, datum: Any) -> bytes:
    """`datum` written with the current schema of `name`, framed as single-object Avro."""
    codec = default_codec()
    buf = BytesIO()
    buf.write(MARKER + codec.fingerprint(name))
    fastavro.schemaless_writer(buf, _parsed(name), datum)
    return buf.getvalue()


def frames(name: str) -> st.SearchStrategy[bytes]:
    """Valid single-object frames of record `name`."""
    return datums(_wire_schema(name)).map(lambda d: frame(name, d))


def _wire_schema(name: str) -> dict[str, Any]:
    return default_codec().schema(name)  # fastavro writes int millis as they are into timestamp-millis


@cache
def _parsed(name: str) -> Any:
    return fastavro.parse_schema(_wire_schema(name), named_schemas={})  # parsing per example is the slow part


@st.composite
def mutated(draw: st.DrawFn, valid: st.SearchStrategy[bytes]) -> bytes:
    """A valid frame with bits flipped, bytes cut, inserted or overwritten, or its fingerprint replaced."""
    data = bytearray(draw(valid))
    for _ in range(draw(st.integers(1, 4))):
        how = draw(st.sampled_from(["flip", "truncate", "insert", "delete", "overwrite", "fingerprint"]))
        at = draw(st.integers(0, max(0, len(data) - 1)))
        if how == "flip" and data:
            data[at] ^= 1 << draw(st.integers(0, 7))
        elif how == "truncate":
            del data[at:]
        elif how == "insert":
            data[at:at] = draw(st.binary(min_size=1, max_size=8))
        elif how == "delete":
            del data[at:at + draw(st.integers(1, 8))]
        elif how == "overwrite":
            chunk = draw(st.binary(min_size=1, max_size=8))
            data[at:at + len(chunk)] = chunk
        else:
            data[2:10] = draw(st.binary(min_size=8, max_size=8))
    return bytes(data)
