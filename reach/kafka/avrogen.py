"""Avro writers generated from a record's .avsc: straight-line Python per field, made once per process.

fastavro's schemaless writer interprets the schema for every record (a Receipt: 28 fields, eight unions resolved
by type checks, ~20 µs). `writer(schema)` turns the schema into the code a person would write for it (a varint per
int, a null or branch marker per `["null", T]` union, a symbol index per enum, a loop per map and array) and
compiles it, so a new field is a schema edit: the code follows (docs/decisions/0055-one-fold-generated-encoders.md).
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
    return varint(len(raw)) + raw


def _raw_bytes(b: bytes) -> bytes:
    return varint(len(b)) + b


def _fields(value: Any) -> Mapping[str, Any]:
    """A record's fields: the mapping itself, or a model's field values."""
    return value if isinstance(value, Mapping) else value.__dict__


_HELPERS: dict[str, Any] = {
    "_v": varint, "_s": string, "_b": _raw_bytes, "_f": _fields, "_d": struct.Struct("<d").pack,
    "_fl": struct.Struct("<f").pack, "_MISSING": object(),
}


class _Gen:
    """Builds the source of one writer: a function per named record, the constants it closes over."""

    def __init__(self) -> None:
        self.named: dict[str, Any] = {}  # full name -> schema (named types are declared once, then referenced)
        self.functions: dict[str, list[str]] = {}  # record full name -> its function's lines
        self.constants: dict[str, Any] = {}
        self._n = 0

    def const(self, value: Any) -> str:
        """An expression for `value`: a literal for None, bytes, ints and strings, else a name the scope binds."""
        if value is None or isinstance(value, (bytes, int, str)):
            return repr(value)
        self._n += 1
        name = f"_k{self._n}"
        self.constants[name] = value
        return name

    def temp(self) -> str:
        self._n += 1
        return f"t{self._n}"

    def record(self, schema: Mapping[str, Any], namespace: str) -> str:
        """The name of the function writing this record (generated once per named record)."""
        full = _full(schema["name"], schema.get("namespace", namespace))
        fn = "_w_" + full.replace(".", "_")
        if full in self.functions:
            return fn
        self.named[full] = schema
        self.functions[full] = []  # taken: a recursive reference finds the name
        ns = full.rpartition(".")[0]
        lines = [f"def {fn}(r, a):", "    if type(r) is not dict:", "        r = _f(r)"]
        for field in schema["fields"]:
            var = self.temp()
            key = repr(field["name"])
            if "default" in field and field["default"] is None:
                lines.append(f"    {var} = r.get({key})")
            elif "default" in field:
                lines.append(f"    {var} = r.get({key}, {self.const(field['default'])})")
            else:
                lines.append(f"    {var} = r[{key}]")
            lines += ["    " + line for line in self.value(field["type"], var, ns)]
        self.functions[full] = lines
        return fn

    def value(self, schema: Any, var: str, ns: str) -> list[str]:
        """Lines that append the encoding of `var` (of type `schema`) with `a(...)`."""
        if isinstance(schema, str):
            if schema in _PRIMITIVE:
                return self.primitive(schema, var)
            full = _full(schema, ns)
            named = self.named.get(full) or self.named.get(schema)
            if named is None:
                raise Unsupported(f"unknown type {schema!r}")
            return self.value(named, var, ns)
        if isinstance(schema, list):
            return self.union(schema, var, ns)
        kind = schema["type"]
        if kind == "record":
            return [f"{self.record(schema, ns)}({var}, a)"]
        if kind == "enum":
            full = _full(schema["name"], schema.get("namespace", ns))
            self.named[full] = schema
            index = self.const({symbol: varint(i) for i, symbol in enumerate(schema["symbols"])})
            return [f"a({index}[{var}])"]
        if kind == "fixed":
            self.named[_full(schema["name"], schema.get("namespace", ns))] = schema
            return [f"a({var})"]
        if kind == "array":
            item = self.temp()
            return [f"if {var}:", f"    a(_v(len({var})))", f"    for {item} in {var}:",
                    *("        " + line for line in self.value(schema["items"], item, ns)), "a(b'\\x00')"]
        if kind == "map":
            key, item = self.temp(), self.temp()
            return [f"if {var}:", f"    a(_v(len({var})))", f"    for {key}, {item} in {var}.items():",
                    f"        a(_s({key}))", *("        " + line for line in self.value(schema["values"], item, ns)),
                    "a(b'\\x00')"]
        if kind in _PRIMITIVE:  # {"type": "long", "logicalType": ...}: written as the primitive
            return self.primitive(kind, var)
        raise Unsupported(f"type {kind!r} is not generated")

    def union(self, branches: list[Any], var: str, ns: str) -> list[str]:
        others = [b for b in branches if b != "null"]
        if len(others) != 1 or len(branches) != 2:
            raise Unsupported(f"union {branches!r}: only [null, T] and [T, null] are generated")
        null_at = branches.index("null")
        marker = self.const(varint(1 - null_at))
        return [f"if {var} is None:", f"    a({self.const(varint(null_at))})", "else:", f"    a({marker})",
                *("    " + line for line in self.value(others[0], var, ns))]

    @staticmethod
    def primitive(kind: str, var: str) -> list[str]:
        return {
            "null": [],
            "boolean": [f"a(b'\\x01' if {var} else b'\\x00')"],
            "int": [f"a(_v({var}))"], "long": [f"a(_v({var}))"],
            "float": [f"a(_fl({var}))"], "double": [f"a(_d({var}))"],
            "bytes": [f"a(_b({var}))"], "string": [f"a(_s({var}))"],
        }[kind]


def _full(name: str, namespace: str | None) -> str:
    return name if "." in name or not namespace else f"{namespace}.{name}"


def source(schema: Mapping[str, Any]) -> tuple[str, dict[str, Any]]:
    """The Python source of the writer of record `schema` (function `write(record) -> bytes`, `_HEADER` first) and
    the constants it reads. Unsupported for a shape it does not generate."""
    gen = _Gen()
    top = gen.record(schema, schema.get("namespace", ""))
    lines = [line for fn in gen.functions.values() for line in (*fn, "")]
    lines += ["def write(record):", "    out = [_HEADER]", f"    {top}(record, out.append)", "    return b''.join(out)"]
    return "\n".join(lines) + "\n", gen.constants


def writer(schema: Mapping[str, Any], *, header: bytes = b"") -> Writer:
    """A function writing a record of `schema` (a mapping, or a model whose fields are the schema's) as Avro,
    `header` first (the single-object marker and fingerprint). Unsupported when the schema is not generated."""
    text, constants = source(schema)
    scope: dict[str, Any] = {**_HELPERS, **constants, "_HEADER": header}
    exec(compile(text, f"<avro writer {schema.get('name')}>", "exec"), scope)  # noqa: S102 - our own generated code
    return scope["write"]  # type: ignore[no-any-return]
