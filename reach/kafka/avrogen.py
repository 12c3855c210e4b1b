"""Avro writers and readers generated from a record's .avsc: straight-line Python per field, made once per process.

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

`reader(schema)` is the same for reading: a dict per record, in schema order, as fastavro's schemaless reader returns
it, for bytes written with exactly that schema (no resolution between versions: the codec reads older ones).

`encode(record)` is `codec.encode` by a generated single-object writer for the record types that have one checked
against the codec on samples (today: Envelope, the SDK's publishers, decision 0057), while records are written
single-object with today's schema (no Schema Registry, no REACH_RECORDS_WRITE_AS pin); else the codec. It was a
second generator of its own (`avrowriter`) until decision 0063 made it this one.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from reach.errors import ReachError
from reach.kafka import codec
from reach.records import AvroRecord

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


class _Source:
    """What both generators keep: the named types seen, the generated functions' lines, the constants they read."""

    prefix = "_w_"

    def __init__(self) -> None:
        self.named: dict[str, Any] = {}  # full name -> schema (named types are declared once, then referenced)
        self.functions: dict[str, list[str]] = {}  # function name -> its lines
        self.constants: dict[str, Any] = {}
        self._n = 0

    def temp(self, prefix: str = "t") -> str:
        self._n += 1
        return f"{prefix}{self._n}"

    def start(self, schema: Mapping[str, Any], namespace: str) -> tuple[str, str, bool]:
        """The function name of a named record, its namespace, and whether it is new (its name now taken, so a
        recursive reference finds it)."""
        full = _full(schema["name"], schema.get("namespace", namespace))
        fn = self.prefix + full.replace(".", "_")
        if fn in self.functions:
            return fn, "", False
        self.named[full] = schema
        self.functions[fn] = []
        return fn, full.rpartition(".")[0], True

    def resolved(self, schema: Any, ns: str) -> Any:
        """A reference to a named type as that type's schema (anything else as it is)."""
        if not isinstance(schema, str) or schema in _PRIMITIVE:
            return schema
        named = self.named.get(_full(schema, ns)) or self.named.get(schema)
        if named is None:
            raise Unsupported(f"unknown type {schema!r}")
        return named


def _branch(union: list[Any]) -> Any:
    """The non-null branch of a `[null, T]` or `[T, null]` union; Unsupported for any other union."""
    others = [b for b in union if b != "null"]
    if len(others) != 1 or len(union) != 2:
        raise Unsupported(f"union {union!r}: only [null, T] and [T, null] are generated")
    return others[0]


class _Gen(_Source):
    """Builds the source of one writer: a function per named record and per map or array type, each returning the
    bytes of its value as one `b"".join` of expressions, and the constants they read."""

    def const(self, value: Any) -> str:
        """An expression for `value`: a literal for None, bytes, ints and strings, else a name the scope binds."""
        if value is None or isinstance(value, (bytes, int, str)):
            return repr(value)
        name = self.temp("_k")
        self.constants[name] = value
        return name

    def record(self, schema: Mapping[str, Any], namespace: str) -> str:
        """The name of the function writing this record (generated once per named record)."""
        fn, ns, new = self.start(schema, namespace)
        if not new:
            return fn
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
        schema = self.resolved(schema, ns)
        if isinstance(schema, str):
            return self.primitive(schema, read)
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
        some = _branch(branches)
        null_at = branches.index("null")
        var = self.temp()
        return (f"({varint(null_at)!r} if ({var} := {read}) is None else "
                f"{varint(1 - null_at)!r} + {self.value(some, var, ns)})")

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


# -- readers ------------------------------------------------------------------------------------------------------


Reader = Callable[[bytes, int], Any]


class Corrupt(ValueError):
    """The bytes do not hold a record of the schema (truncated, a bad union branch or enum index)."""


def _long(b: bytes, i: int) -> tuple[int, int]:
    """A zigzag varint at `i`: its value and the position after it."""
    n = shift = 0
    while True:
        z = b[i]
        i += 1
        n |= (z & 0x7F) << shift
        if z < 0x80:
            return (n >> 1) ^ -(n & 1), i
        shift += 7
        if shift > 63:
            raise Corrupt("a varint longer than ten bytes")


def _end(b: bytes, i: int, n: int) -> int:
    """The end of `n` bytes starting at `i`; Corrupt past the buffer or for a negative length."""
    e = i + n
    if n < 0 or e > len(b):
        raise Corrupt(f"a length of {n} at {i} runs past the record's {len(b)} bytes")
    return e


_READ_HELPERS: dict[str, Any] = {"_long": _long, "_end": _end, "_unpack_d": struct.Struct("<d").unpack_from,
                                 "_unpack_f": struct.Struct("<f").unpack_from, "Corrupt": Corrupt}


class _ReadGen(_Source):
    """Builds the source of one reader: a function per named record, map and array, `(bytes, pos) -> (value, pos)`."""

    prefix = "_r_"

    def record(self, schema: Mapping[str, Any], namespace: str) -> str:
        fn, ns, new = self.start(schema, namespace)
        if not new:
            return fn
        lines, names = [], []
        for field in schema["fields"]:
            var = self.temp("v")
            lines += self.value(field["type"], var, ns)
            names.append(f"{field['name']!r}: {var}")
        self.functions[fn] = [f"def {fn}(b, i):", *("    " + line for line in lines),
                              "    return {" + ", ".join(names) + "}, i"]
        return fn

    def value(self, schema: Any, var: str, ns: str) -> list[str]:
        """Lines that read a value of `schema` at `i` into `var` and move `i` past it."""
        schema = self.resolved(schema, ns)
        if isinstance(schema, str):
            return self.primitive(schema, var)
        if isinstance(schema, list):
            branch = _branch(schema)
            null, some = (0, 2) if schema[0] == "null" else (2, 0)
            return ["z = b[i]", "i += 1", f"if z == {null}:", f"    {var} = None", f"elif z == {some}:",
                    *("    " + line for line in self.value(branch, var, ns)),
                    "else:", "    raise Corrupt(f'union branch {z} at {i - 1}')"]
        kind = schema["type"]
        if kind == "record":
            return [f"{var}, i = {self.record(schema, ns)}(b, i)"]
        if kind == "enum":
            self.named[_full(schema["name"], schema.get("namespace", ns))] = schema
            symbols = self.temp("_y")
            self.constants[symbols] = tuple(schema["symbols"])
            return [f"{var}, i = _long(b, i)", f"if not 0 <= {var} < {len(schema['symbols'])}:",
                    f"    raise Corrupt(f'enum index {{{var}}}')", f"{var} = {symbols}[{var}]"]
        if kind in ("array", "map"):
            return [f"{var}, i = {self.block(schema, ns)}(b, i)"]
        if kind in _PRIMITIVE:
            return self.primitive(kind, var)
        raise Unsupported(f"type {kind!r} is not generated")

    def block(self, schema: Mapping[str, Any], ns: str) -> str:
        fn = self.temp("_rc")
        self.functions[fn] = []
        if schema["type"] == "array":
            start, item, add = "out = []", self.value(schema["items"], "x", ns), "out.append(x)"
        else:
            start, add = "out = {}", "out[k] = x"
            item = [*self.primitive("string", "k"), *self.value(schema["values"], "x", ns)]
        self.functions[fn] = [
            f"def {fn}(b, i):", f"    {start}", "    while True:", "        n, i = _long(b, i)", "        if n == 0:",
            "            return out, i", "        if n < 0:  # a block with its size in bytes", "            n = -n",
            "            _size, i = _long(b, i)", "        for _ in range(n):",
            *("            " + line for line in item), f"            {add}"]
        return fn

    @staticmethod
    def primitive(kind: str, var: str) -> list[str]:
        if kind in ("int", "long"):
            return ["z = b[i]", "if z < 0x80:", f"    {var} = (z >> 1) ^ -(z & 1)", "    i += 1", "else:",
                    f"    {var}, i = _long(b, i)"]
        if kind in ("string", "bytes"):
            take = "b[i:e].decode()" if kind == "string" else "bytes(b[i:e])"
            return ["n = b[i]", "if n < 0x80:", "    n = (n >> 1) ^ -(n & 1)", "    i += 1", "else:",
                    "    n, i = _long(b, i)", "e = _end(b, i, n)", f"{var} = {take}", "i = e"]
        return {
            "null": [f"{var} = None"],
            "boolean": [f"{var} = b[i] != 0", "i += 1"],
            "double": [f"{var}, = _unpack_d(b, i)", "i += 8"],
            "float": [f"{var}, = _unpack_f(b, i)", "i += 4"],
        }[kind]


def reader(schema: Mapping[str, Any]) -> Callable[[bytes, int], Any]:
    """A function reading a record of `schema` (as fastavro's schemaless reader does, into a dict) from `bytes`
    starting at a position; it raises Corrupt, IndexError, struct.error or UnicodeDecodeError for bytes that are no
    such record, and does not check that the record ends the buffer (the caller does: `read(b, i) -> (dict, end)`).
    Unsupported when the schema is not generated."""
    gen = _ReadGen()
    top = gen.record(schema, schema.get("namespace", ""))
    text = "\n".join(line for fn in gen.functions.values() for line in (*fn, "")) + f"\nread = {top}\n"
    scope: dict[str, Any] = {**_READ_HELPERS, **gen.constants}
    exec(compile(text, f"<avro reader {schema.get('name')}>", "exec"), scope)  # noqa: S102 - our own generated code
    return scope["read"]  # type: ignore[no-any-return]


# -- checked single-object writers (the SDK's envelopes) -------------------------------------------------------


class RecordWriter:
    """Writes one record type, as a model or a mapping, to single-object Avro bytes (the codec's own header)."""

    def __init__(self, name: str) -> None:
        family = codec.default_codec()._load(name)  # noqa: SLF001 - the parsed schema and its header
        self.encode: Writer = writer(family.raw, header=family.header)


def compiled(model: type[AvroRecord], samples: Sequence[AvroRecord]) -> RecordWriter | None:
    """A writer for `model` if records are written single-object with today's schema and it writes the codec's
    bytes for every sample; else None (write with `codec.encode`)."""
    default = codec.default_codec()
    if codec.wire_codec() is not default or default.pinned(model.avro_name):
        return None
    try:
        made = RecordWriter(model.avro_name)
        same = all(made.encode(sample) == default.encode(sample) for sample in samples)
    except Exception:  # noqa: BLE001 - any mismatch means: do not use the generated writer
        return None
    return made if same else None


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
    """`codec.encode(record)`, by a generated writer when its record type has one that matched the codec's bytes
    (today: Envelope) and records are written single-object with today's schema."""
    name = record.avro_name
    default = codec.default_codec()
    if name in _SAMPLES and codec.wire_codec() is default and not default.pinned(name):
        if name not in _writers:
            _writers[name] = compiled(type(record), _SAMPLES[name]())
        made = _writers[name]
        if made is not None:
            return made.encode(record)
    return codec.encode(record)
