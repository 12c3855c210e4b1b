"""Avro writers generated from a record's .avsc: straight-line Python per field, made once per process.

fastavro's schemaless writer interprets the schema for every record (a Receipt: 28 fields, eight unions resolved
by type checks, ~20 µs). `writer(schema)` turns the schema into the code a person would write for it (a varint per
int, a null or branch marker per `["null", T]` union, a symbol index per enum, a loop per map and array; a record is
one `b"".join` of its fields' expressions) and compiles it, so a new field is a schema edit: the code follows
(docs/decisions/0055-one-fold-generated-encoders.md).
Its output is fastavro's, byte for byte, for any value fastavro accepts (a hypothesis test holds it); what fastavro
would refuse (a wrong type) is not checked here: the fast writers are handed models or dicts the product built.

A record is read by key from a mapping, or from a pydantic model's fields (`__dict__`), so one writer takes a
decoded dict, keyword arguments and a `Receipt`; a field a mapping lacks takes its schema default, as in fastavro.
Unions of more than one non-null branch are not generated (`Unsupported`): the caller keeps the codec.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Mapping
from typing import Any

from reach.errors import ReachError

Writer = Callable[[Any], bytes]
_PRIMITIVE = ("null", "boolean", "int", "long", "float", "double", "bytes", "string")
_SMALL = [bytes((z,)) for z in range(0x80)]


class Unsupported(ReachError, ValueError):
    """The schema uses a shape this generator does not write (the codec writes such records)."""


def varint(n: int) -> bytes:
    """Avro int/long: zigzag, then 7 bits per byte, least significant first."""
    z = (n << 1) ^ (n >> 63)
    if z < 0x80:
        return _SMALL[z]
    if 0x800000000 <= z < 0x40000000000:  # six bytes: epoch millis (every receipt's `at`, deadlines), unrolled
        return bytes((z & 0x7F | 0x80, z >> 7 & 0x7F | 0x80, z >> 14 & 0x7F | 0x80, z >> 21 & 0x7F | 0x80,
                      z >> 28 & 0x7F | 0x80, z >> 35))
    out = bytearray()
    while z >= 0x80:
        out.append((z & 0x7F) | 0x80)
        z >>= 7
    out.append(z)
    return bytes(out)


def string(s: str) -> bytes:
    raw = s.encode()
    n = len(raw)
    return _SMALL[n << 1] + raw if n < 0x40 else varint(n) + raw


def _raw_bytes(b: bytes) -> bytes:
    n = len(b)
    return _SMALL[n << 1] + b if n < 0x40 else varint(n) + b


def _fields(value: Any) -> Mapping[str, Any]:
    """A record's fields: the mapping itself, or a model's field values."""
    return value if isinstance(value, Mapping) else value.__dict__


_HELPERS: dict[str, Any] = {
    "_v": varint, "_s": string, "_b": _raw_bytes, "_f": _fields, "_d": struct.Struct("<d").pack,
    "_fl": struct.Struct("<f").pack, "_MISSING": object(),
}


class _Gen:
    """Builds the source of one writer: a function per named record and per map or array type, each returning the
    bytes of its value as one `b"".join` of expressions, and the constants they read."""

    def __init__(self) -> None:
        self.named: dict[str, Any] = {}  # full name -> schema (named types are declared once, then referenced)
        self.functions: dict[str, list[str]] = {}  # function name -> its lines
        self.constants: dict[str, Any] = {}
        self._n = 0

    def const(self, value: Any) -> str:
        """An expression for `value`: a literal for None, bytes, ints and strings, else a name the scope binds."""
        if value is None or isinstance(value, (bytes, int, str)):
            return repr(value)
        name = self.temp("_k")
        self.constants[name] = value
        return name

    def temp(self, prefix: str = "t") -> str:
        self._n += 1
        return f"{prefix}{self._n}"

    def record(self, schema: Mapping[str, Any], namespace: str) -> str:
        """The name of the function writing this record (generated once per named record)."""
        full = _full(schema["name"], schema.get("namespace", namespace))
        fn = "_w_" + full.replace(".", "_")
        if fn in self.functions:
            return fn
        self.named[full] = schema
        self.functions[fn] = []  # taken: a recursive reference finds the name
        ns = full.rpartition(".")[0]
        parts = []
        for field in schema["fields"]:
            key = repr(field["name"])
            if "default" in field and field["default"] is None:
                read = f"r.get({key})"
            elif "default" in field:
                read = f"r.get({key}, {self.const(field['default'])})"
            else:
                read = f"r[{key}]"
            parts.append(self.value(field["type"], read, ns))
        self.functions[fn] = [f"def {fn}(r):", "    if type(r) is not dict:", "        r = _f(r)",
                              "    return b''.join((", *(f"        {part}," for part in parts), "    ))"]
        return fn

    def value(self, schema: Any, read: str, ns: str) -> str:
        """An expression for the bytes of the value `read` evaluates to (evaluated once), of type `schema`."""
        if isinstance(schema, str):
            if schema in _PRIMITIVE:
                return self.primitive(schema, read)
            named = self.named.get(_full(schema, ns)) or self.named.get(schema)
            if named is None:
                raise Unsupported(f"unknown type {schema!r}")
            return self.value(named, read, ns)
        if isinstance(schema, list):
            return self.union(schema, read, ns)
        kind = schema["type"]
        if kind == "record":
            return f"{self.record(schema, ns)}({read})"
        if kind == "enum":
            self.named[_full(schema["name"], schema.get("namespace", ns))] = schema
            index = self.const({symbol: varint(i) for i, symbol in enumerate(schema["symbols"])})
            return f"{index}[{read}]"
        if kind == "fixed":
            self.named[_full(schema["name"], schema.get("namespace", ns))] = schema
            return read
        if kind in ("array", "map"):
            return f"{self.block(schema, ns)}({read})"
        if kind in _PRIMITIVE:  # {"type": "long", "logicalType": ...}: written as the primitive
            return self.primitive(kind, read)
        raise Unsupported(f"type {kind!r} is not generated")

    def block(self, schema: Mapping[str, Any], ns: str) -> str:
        """A function writing an array or a map: one block (its count, its items), then the end marker."""
        fn = self.temp("_c")
        self.functions[fn] = []
        if schema["type"] == "array":
            loop, item = "for x in c:", self.value(schema["items"], "x", ns)
        else:
            loop, item = "for k, x in c.items():", f"_s(k) + {self.value(schema['values'], 'x', ns)}"
        self.functions[fn] = [f"def {fn}(c):", "    if not c:", "        return b'\\x00'", "    out = [_v(len(c))]",
                              f"    {loop}", f"        out.append({item})", "    out.append(b'\\x00')",
                              "    return b''.join(out)"]
        return fn

    def union(self, branches: list[Any], read: str, ns: str) -> str:
        others = [b for b in branches if b != "null"]
        if len(others) != 1 or len(branches) != 2:
            raise Unsupported(f"union {branches!r}: only [null, T] and [T, null] are generated")
        null_at = branches.index("null")
        var = self.temp()
        return (f"({varint(null_at)!r} if ({var} := {read}) is None else "
                f"{varint(1 - null_at)!r} + {self.value(others[0], var, ns)})")

    @staticmethod
    def primitive(kind: str, read: str) -> str:
        return {
            "null": "b''", "boolean": f"(b'\\x01' if {read} else b'\\x00')",
            "int": f"_v({read})", "long": f"_v({read})", "float": f"_fl({read})", "double": f"_d({read})",
            "bytes": f"_b({read})", "string": f"_s({read})",
        }[kind]


def _full(name: str, namespace: str | None) -> str:
    return name if "." in name or not namespace else f"{namespace}.{name}"


def source(schema: Mapping[str, Any]) -> tuple[str, dict[str, Any]]:
    """The Python source of the writer of record `schema` (function `write(record) -> bytes`, `_HEADER` first) and
    the constants it reads. Unsupported for a shape it does not generate."""
    gen = _Gen()
    top = gen.record(schema, schema.get("namespace", ""))
    lines = [line for fn in gen.functions.values() for line in (*fn, "")]
    lines += ["def write(record):", f"    return _HEADER + {top}(record)"]
    return "\n".join(lines) + "\n", gen.constants


def writer(schema: Mapping[str, Any], *, header: bytes = b"") -> Writer:
    """A function writing a record of `schema` (a mapping, or a model whose fields are the schema's) as Avro,
    `header` first (the single-object marker and fingerprint). Unsupported when the schema is not generated."""
    text, constants = source(schema)
    scope: dict[str, Any] = {**_HELPERS, **constants, "_HEADER": header}
    exec(compile(text, f"<avro writer {schema.get('name')}>", "exec"), scope)  # noqa: S102 - our own generated code
    return scope["write"]  # type: ignore[no-any-return]
