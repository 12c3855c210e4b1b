"""Single-object Avro writers compiled from a record's schema file: they read the model's attributes directly.

`codec.encode(envelope)` costs ~30 µs: `model_dump` builds a dict, then fastavro walks the schema and resolves
every union per record. A writer compiled once from the parsed `.avsc` (strings, bytes, ints, booleans, doubles,
null unions, arrays, maps, nested records and enums) writes the same bytes from the model's attributes in a few
µs. `compiled(model, samples)` returns a writer only when its output equals the codec's for every sample, and
only while records are written single-object with today's schema (no Schema Registry, no
REACH_RECORDS_WRITE_AS pin); otherwise None, and callers use the codec. A schema this compiler does not know
(a union of two non-null types, a fixed) also yields None. Decision 0057.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Sequence
from typing import Any

from reach.kafka import codec as _codec
from reach.records import AvroRecord

Write = Callable[[Any], bytes]
NULL = b"\x00"
SOME = b"\x02"  # union branch 1, after "null"
_SMALL = [bytes((z,)) for z in range(0x80)]
_DOUBLE = struct.Struct("<d").pack
_FLOAT = struct.Struct("<f").pack


class Unsupported(Exception):
    """A schema construct this compiler leaves to the codec."""


def varint(n: int) -> bytes:
    """Avro int/long: zigzag, then 7 bits per byte, least significant first."""
    z = (n << 1) ^ (n >> 63)
    if z < 0x80:
        return _SMALL[z]
    out = bytearray()
    while z >= 0x80:
        out.append((z & 0x7F) | 0x80)
        z >>= 7
    out.append(z)
    return bytes(out)


def _string(value: str) -> bytes:
    raw = value.encode()
    n = len(raw)
    return (_SMALL[n << 1] if n < 64 else varint(n)) + raw


def _bytes(value: bytes) -> bytes:
    n = len(value)
    return (_SMALL[n << 1] if n < 64 else varint(n)) + value


_SMALL_INTS = {n: varint(n) for n in range(-64, 64)}  # one byte each: counters, attempts, priorities


def _array(item: Write) -> Write:
    def write(values: Sequence[Any]) -> bytes:
        if not values:
            return NULL
        return varint(len(values)) + b"".join([item(v) for v in values]) + NULL

    return write


def _map(value_writer: Write) -> Write:
    def write(values: dict[str, Any]) -> bytes:
        if not values:
            return NULL
        return varint(len(values)) + b"".join([_string(k) + value_writer(v) for k, v in values.items()]) + NULL

    return write


_PRIMITIVES = {"string": "_string({})", "bytes": "_bytes({})", "int": "(_small_ints.get({0}) or varint({0}))",
               "long": "(_small_ints.get({0}) or varint({0}))",
               "boolean": "(b'\\x01' if {} else NULL)", "double": "_double({})", "float": "_float({})",
               "null": "b''"}


class _Source:
    """Python source for one schema: a list of part expressions per record, helpers bound by name."""

    def __init__(self) -> None:
        self.names: dict[str, Any] = {"varint": varint, "_string": _string, "_bytes": _bytes, "NULL": NULL,
                                      "_small_ints": _SMALL_INTS,
                                      "SOME": SOME, "_double": _DOUBLE, "_float": _FLOAT}

    def bind(self, value: Any) -> str:
        name = f"_h{len(self.names)}"
        self.names[name] = value
        return name

    def parts(self, node: Any, x: str) -> list[str]:
        """Expressions whose bytes, concatenated, are the value `x` written as `node`."""
        if isinstance(node, dict) and node.get("type") == "record":
            return [p for f in node["fields"] for p in self.parts(f["type"], f"{x}.{f['name']}")]
        return [self.expression(node, x)]

    def expression(self, node: Any, x: str) -> str:
        if isinstance(node, str):
            if node not in _PRIMITIVES:
                raise Unsupported(f"named type {node!r}")
            return _PRIMITIVES[node].format(x)
        if isinstance(node, list):
            if len(node) == 2 and node[0] == "null":
                return f"(NULL if {x} is None else SOME + {self.joined(node[1], x)})"
            raise Unsupported(f"union {node!r}")
        kind = node.get("type")
        if kind == "record":
            return self.joined(node, x)
        if kind in ("array", "map"):
            inner = self.bind(self.function(node["items" if kind == "array" else "values"]))
            return f"{self.bind((_array if kind == 'array' else _map)(self.names[inner]))}({x})"
        if kind == "enum":
            return f"{self.bind({s: varint(i) for i, s in enumerate(node['symbols'])})}[{x}]"
        if isinstance(kind, str) and kind in _PRIMITIVES:  # {"type": "long", "logicalType": ...}: the wire value
            return _PRIMITIVES[kind].format(x)
        raise Unsupported(f"type {kind!r}")

    def joined(self, node: Any, x: str) -> str:
        parts = self.parts(node, x)
        return parts[0] if len(parts) == 1 else "b''.join((" + ", ".join(parts) + ",))"

    def function(self, node: Any, prefix: bytes = b"") -> Write:
        body = self.joined(node, "o")
        if prefix:
            body = f"{self.bind(prefix)} + {body}"
        namespace = dict(self.names)
        exec(f"def write(o):\n    return {body}\n", namespace)  # noqa: S102 - source built above from the schema
        return namespace["write"]  # type: ignore[no-any-return]


class RecordWriter:
    """Writes one record type, as a model, to single-object Avro bytes (the codec's own header)."""

    def __init__(self, name: str) -> None:
        family = _codec.default_codec()._load(name)  # noqa: SLF001 - the parsed schema and its header
        self.encode: Write = _Source().function(family.raw, family.header)


def compiled(model: type[AvroRecord], samples: Sequence[AvroRecord]) -> RecordWriter | None:
    """A writer for `model` if records are written single-object with today's schema and it writes the codec's
    bytes for every sample; else None (write with `codec.encode`)."""
    default = _codec.default_codec()
    if _codec.wire_codec() is not default or default.pinned(model.avro_name):
        return None
    try:
        writer = RecordWriter(model.avro_name)
        same = all(writer.encode(sample) == default.encode(sample) for sample in samples)
    except Exception:  # noqa: BLE001 - any mismatch means: do not use the compiled writer
        return None
    return writer if same else None


def _envelope_samples() -> list[AvroRecord]:
    from reach.records import Envelope, RoutingHints

    base = Envelope(message_id="01J0000000000000000000000Ö", trace_id="t", tenant="default", source="s",
                    capability="a.b", payload=b'{"x":1}', created_at=1_800_000_000_000, deadline=1_800_000_045_000,
                    delivery_timeout_ms=5_000)
    full = base.model_copy(update={
        "parent_id": "p", "capability_version": "^1.2", "intent": "é" * 70, "to_agent": "agent://a/b",
        "content_type": "application/octet-stream", "schema_version": "2",
        "routing": RoutingHints(region="eu", session_key="s-1", tags=["x", "y"], priority=-3, canary=True),
        "execution_timeout_ms": 120_000, "expire_at": 1_800_000_100_000, "attempt": 3, "max_attempts": 5,
        "generation": 2, "reroutes": 1, "excluded_instances": ["i-1", "i-2"], "idempotency_key": "k",
        "reply_to": "ns.replies.c", "callback": '{"channel":"w"}', "headers": {"h": "v", "ü": "ß"},
        "session_snapshot": "t:k", "max_tokens": 1 << 40, "max_cost_micros": 0})
    return [base, full, base.model_copy(update={"payload": bytes(range(256)) * 4, "max_tokens": 7})]


_SAMPLES: dict[str, Callable[[], list[AvroRecord]]] = {"Envelope": _envelope_samples}
_writers: dict[str, RecordWriter | None] = {}


def encode(record: AvroRecord) -> bytes:
    """`codec.encode(record)`, by a compiled writer when its record type has one that matched the codec's bytes
    (today: Envelope) and records are written single-object with today's schema."""
    name = record.avro_name
    default = _codec.default_codec()
    if name in _SAMPLES and _codec.wire_codec() is default and not default.pinned(name):
        if name not in _writers:
            _writers[name] = compiled(type(record), _SAMPLES[name]())
        writer = _writers[name]
        if writer is not None:
            return writer.encode(record)
    return _codec.encode(record)
