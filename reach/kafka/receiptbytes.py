"""Receipts written straight to single-object Avro bytes by the writer generated from Receipt.avsc.

fastavro walks the 28 fields of a Receipt and resolves its eight unions per record (~20 µs, plus ~3 µs of
`model_dump`). `ReceiptWriter` is the code `reach.kafka.avrogen` generates from the schema, made once per process:
every receipt, nested records included, from a `Receipt`, a dict or keyword arguments, so a new Receipt field is a
schema edit (docs/decisions/0055-one-fold-generated-encoders.md). `ReceiptWriter.create()` checks its output against
the codec on samples and returns None when they differ: callers then use the codec. Only for the single-object
framing and today's schema: with a Schema Registry the wire codec frames records, and with receipts pinned to an
older release (REACH_RECORDS_WRITE_AS) the codec writes them; callers use it then.

`decode_receipt` is the same for reading: the reader generated from the schema for today's receipts (about half of
fastavro's cost), the codec for any other.

The primitives below (`varint`, `string`, `StringCache`, `checked` ...) are also those of the router's ROUTED writer
(reach.streams.router.routed_receipt), which `FIELDS` is the layout of.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar, cast

from reach.kafka import avrogen
from reach.kafka import codec as _codec
from reach.kafka.avrogen import string, varint
from reach.records import ErrorInfo, Receipt, Status, StepStatus, Usage

FIELDS = ("message_id", "generation", "trace_id", "tenant", "capability", "agent_id", "instance_id", "status",
          "attempt", "at", "error", "retry_after_ms", "result", "step_status", "timings", "decision", "cost",
          "due_at", "deadline", "delivery_timeout_ms", "reroutes", "reused_from", "channel", "callback",
          "resolution", "progress", "input", "usage", "fanout")
"""The Receipt fields the router's hand-written ROUTED writer was written for (it checks them before it writes)."""
NULL = b"\x00"
SOME = b"\x02"  # union branch 1 (after "null")

__all__ = ["FIELDS", "NULL", "SOME", "ReceiptWriter", "StringCache", "as_dict", "checked", "encode_receipt",
           "decode_receipt", "flat_writer", "optional_bytes", "optional_long", "optional_string", "string", "varint"]


def optional_long(n: int | None) -> bytes:
    return NULL if n is None else SOME + varint(n)


def optional_string(s: str | None) -> bytes:
    return NULL if s is None else SOME + string(s)


def optional_bytes(b: bytes | None) -> bytes:
    return NULL if b is None else SOME + varint(len(b)) + b


W = TypeVar("W")  # a writer with encode(**fields) -> bytes (keyword-only fields: no Protocol matches them all)


def checked(make: Callable[[], W], samples: list[dict[str, Any]],
            reference: Callable[..., dict[str, Any]]) -> W | None:
    """A Receipt writer from `make`, if it writes the codec's bytes for every sample (the codec gets
    `reference(**sample)`); else None: the caller uses the codec."""
    try:
        writer = make()
        encode, codec = cast(Any, writer).encode, _codec.default_codec()
        same = all(encode(**sample) == codec.encode_dict("Receipt", reference(**sample)) for sample in samples)
    except Exception:  # noqa: BLE001 - any mismatch means: do not use the fast path
        return None
    return writer if same else None


class StringCache:
    """Encoded strings that repeat from record to record (tenant, capability, ids), bounded."""

    def __init__(self, most: int = 10_000) -> None:
        self._most = most
        self._strings: dict[str, bytes] = {}

    def __call__(self, text: str) -> bytes:
        found = self._strings.get(text)
        if found is None:
            if len(self._strings) > self._most:
                self._strings.clear()
            found = self._strings[text] = string(text)
        return found


class ReceiptWriter:
    """Encodes any receipt exactly as `codec.encode_dict("Receipt", ...)`, by the code generated from its schema."""

    def __init__(self) -> None:
        codec = _codec.default_codec()
        self._write = avrogen.writer(codec.schema("Receipt"), header=codec._load("Receipt").header)  # noqa: SLF001

    @classmethod
    def create(cls) -> ReceiptWriter | None:
        """A writer whose output matches the codec on samples, else None (use the codec)."""
        if _codec.default_codec().pinned("Receipt"):
            return None  # pinned: the codec writes receipts as the older release reads them
        return checked(cls, _samples(), as_dict)

    def encode(self, **fields: Any) -> bytes:
        """The receipt with these fields (a missing one takes its schema default) in single-object Avro."""
        return self._write(fields)

    def encode_dict(self, record: Any) -> bytes:
        """A receipt as a dict (what `codec.encode_dict("Receipt", ...)` takes), or a `Receipt`."""
        return self._write(record)

    def encode_receipt(self, receipt: Receipt) -> bytes:
        """The model's bytes (`codec.encode(receipt)`)."""
        return self._write(receipt)


_writer: ReceiptWriter | None = None
_checked = False


def flat_writer() -> ReceiptWriter | None:
    """The process's writer while receipts are written single-object with today's schema, else None (a Schema
    Registry, or receipts pinned to an older version by REACH_RECORDS_WRITE_AS: the codec writes those)."""
    global _writer, _checked
    default = _codec.default_codec()
    if _codec.wire_codec() is not default or default.pinned("Receipt"):
        return None
    if not _checked:
        _writer, _checked = ReceiptWriter.create(), True
    return _writer


def encode_receipt(receipt: Receipt) -> bytes:
    """`codec.encode(receipt)`, by the generated writer when it can."""
    writer = flat_writer()
    return writer.encode_receipt(receipt) if writer is not None else _codec.encode(receipt)


_reader: tuple[bytes, avrogen.Reader] | None = None


def decode_receipt(data: bytes) -> dict[str, Any]:
    """`codec.decode_dict("Receipt", data)`: a receipt written with today's schema (single-object framing) by the
    reader generated from Receipt.avsc, any other (an older version, a Schema Registry's framing, bytes that do not
    decode) by the codec, which also raises its DecodeError for bytes that are no receipt."""
    global _reader
    if _reader is None:
        default = _codec.default_codec()
        _reader = (default._load("Receipt").header, avrogen.reader(default.schema("Receipt")))  # noqa: SLF001
    header, read = _reader
    if data[:_codec.HEADER_SIZE] == header and _codec.wire_codec() is _codec.default_codec():
        try:
            record, end = read(data, _codec.HEADER_SIZE)
        except Exception:  # noqa: BLE001 - corrupt bytes: the codec says how (CorruptBody)
            end = -1
        if end == len(data):
            return record  # type: ignore[no-any-return]
    return _codec.decode_dict("Receipt", data)


def as_dict(**fields: Any) -> dict[str, Any]:
    """The dict `codec.encode_dict("Receipt", ...)` takes for the same receipt (the reference)."""
    out = dict(fields)
    out["status"] = out["status"].value
    if out.get("step_status") is not None:
        out["step_status"] = out["step_status"].value
    for name in ("error", "usage"):
        if out.get(name) is not None:
            out[name] = out[name].model_dump()
    if out.get("timings") is None:
        out.pop("timings", None)
    return out


def _samples() -> list[dict[str, Any]]:
    base = dict(message_id="01J0000000000000000000000Ö", generation=2, trace_id="t", tenant="default",
                capability="a.b", agent_id="agent://a/b", instance_id="i-1", attempt=3, at=1_800_000_000_000)
    return [
        {**base, "status": Status.STARTED, "deadline": 1_800_000_030_000, "delivery_timeout_ms": 5_000},
        {**base, "status": Status.COMPLETED, "step_status": StepStatus.OK, "result": b'{"x":1}',
         "timings": {"run_ms": 300, "cache_hit": 1}, "cost": 0.25, "reroutes": 1, "callback": '{"channel":"w"}',
         "reused_from": "m-0", "due_at": 5},
        {**base, "status": Status.ATTEMPT_FAILED, "agent_id": None, "instance_id": None, "retry_after_ms": 1_000,
         "error": ErrorInfo(kind="TRANSIENT", code="X", message="é" * 70), "step_status": StepStatus.ERROR},
        {**base, "status": Status.COMPLETED, "usage": Usage(input_tokens=3, output_tokens=70, model="m",
                                                             cost_micros=-5, currency="EUR")},
    ]
