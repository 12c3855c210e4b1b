"""Receipts written straight to single-object Avro bytes: the agent's STARTED and outcome receipts.

fastavro walks the 28 fields of a Receipt and resolves its eight unions per record (~20 µs, plus ~3 µs of
`model_dump` and ~9 µs to validate the pydantic model). A receipt without a decision, channel, resolution,
progress, input or usage (STARTED, and almost every COMPLETED / ATTEMPT_FAILED / FAILED) is a run of strings,
varints and union markers; here it is written as such (the router's ROUTED receipt does the same for its decision,
reach.streams.router.routed_receipt). `FlatReceiptWriter.create()` checks its output against the codec on samples
and returns None when they differ (a changed Receipt schema): callers then use the codec. Only for the
single-object framing: with a Schema Registry the wire codec frames records, and callers use it.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Mapping
from typing import Any, TypeVar, cast

from reach.kafka import codec as _codec
from reach.records import ErrorInfo, Receipt, Status, StepStatus

FIELDS = ("message_id", "generation", "trace_id", "tenant", "capability", "agent_id", "instance_id", "status",
          "attempt", "at", "error", "retry_after_ms", "result", "step_status", "timings", "decision", "cost",
          "due_at", "deadline", "delivery_timeout_ms", "reroutes", "reused_from", "channel", "callback",
          "resolution", "progress", "input", "usage", "fanout")
NESTED = ("decision", "channel", "resolution", "progress", "input", "usage", "fanout")  # null here, else the codec
_DOUBLE = struct.Struct("<d")
NULL = b"\x00"
SOME = b"\x02"  # union branch 1 (after "null")


_SMALL = [bytes((z,)) for z in range(0x80)]


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


def optional_long(n: int | None) -> bytes:
    return NULL if n is None else SOME + varint(n)


def optional_string(s: str | None) -> bytes:
    return NULL if s is None else SOME + string(s)


def optional_bytes(b: bytes | None) -> bytes:
    return NULL if b is None else SOME + varint(len(b)) + b


W = TypeVar("W")  # a writer with encode(**fields) -> bytes (keyword-only fields: no Protocol matches them all)


def checked(make: Callable[[], W], samples: list[dict[str, Any]],
            reference: Callable[..., dict[str, Any]]) -> W | None:
    """A hand-written Receipt writer from `make`, if it writes the codec's bytes for every sample (the codec gets
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


class FlatReceiptWriter:
    """Encodes receipts without nested records (but `error`) exactly as `codec.encode_dict("Receipt", ...)`."""

    def __init__(self) -> None:
        schema = _codec.default_codec().schema("Receipt")
        self._header = _codec.default_codec()._load("Receipt").header  # noqa: SLF001 - the single-object header
        statuses = _symbols(schema, "status")
        steps = _symbols(schema, "step_status")
        self._status = {s: varint(statuses.index(s.value)) for s in Status if s.value in statuses}
        self._step = {s: SOME + varint(steps.index(s.value)) for s in StepStatus if s.value in steps}
        self._cached = StringCache()

    @classmethod
    def create(cls) -> FlatReceiptWriter | None:
        """A writer whose output matches the codec on samples, else None (use the codec)."""
        schema = _codec.default_codec().schema("Receipt")
        if [f["name"] for f in schema["fields"]] != list(FIELDS) or _codec.default_codec().pinned("Receipt"):
            return None  # pinned: the codec writes receipts as the older release reads them
        return checked(cls, _samples(), as_dict)

    def encode(
        self,
        *,
        message_id: str,
        generation: int,
        trace_id: str,
        tenant: str,
        capability: str,
        agent_id: str | None,
        instance_id: str | None,
        status: Status,
        attempt: int,
        at: int,
        error: ErrorInfo | None = None,
        retry_after_ms: int | None = None,
        result: bytes | None = None,
        step_status: StepStatus | None = None,
        timings: Mapping[str, int] | None = None,
        cost: float | None = None,
        due_at: int | None = None,
        deadline: int | None = None,
        delivery_timeout_ms: int | None = None,
        reroutes: int = 0,
        reused_from: str | None = None,
        callback: str | None = None,
    ) -> bytes:
        """The receipt in single-object Avro; decision, channel, resolution, progress, input, usage and fanout null."""
        s = self._cached
        parts = [
            self._header, string(message_id), varint(generation), string(trace_id), s(tenant), s(capability),
            NULL if agent_id is None else SOME + s(agent_id), NULL if instance_id is None else SOME + s(instance_id),
            self._status[status], varint(attempt), varint(at),
            NULL if error is None else SOME + string(error.kind) + string(error.code) + string(error.message),
            optional_long(retry_after_ms), optional_bytes(result),
            NULL if step_status is None else self._step[step_status],
        ]
        if timings:
            parts.append(varint(len(timings)))
            for name, value in timings.items():
                parts.append(s(name))
                parts.append(varint(value))
        parts += [
            NULL,  # the end of the timings map
            NULL,  # decision
            NULL if cost is None else SOME + _DOUBLE.pack(cost),
            optional_long(due_at), optional_long(deadline), optional_long(delivery_timeout_ms), varint(reroutes),
            optional_string(reused_from),
            NULL,  # channel
            optional_string(callback),
            NULL, NULL, NULL, NULL, NULL,  # resolution, progress, input, usage, fanout
        ]
        return b"".join(parts)

    def encode_receipt(self, receipt: Receipt) -> bytes | None:
        """The model's bytes, or None when it carries a nested record this writer leaves to the codec."""
        if (receipt.decision is not None or receipt.channel is not None or receipt.resolution is not None
                or receipt.progress is not None or receipt.input is not None or receipt.usage is not None
                or receipt.fanout is not None):
            return None
        return self.encode(
            message_id=receipt.message_id, generation=receipt.generation, trace_id=receipt.trace_id,
            tenant=receipt.tenant, capability=receipt.capability, agent_id=receipt.agent_id,
            instance_id=receipt.instance_id, status=receipt.status, attempt=receipt.attempt, at=receipt.at,
            error=receipt.error, retry_after_ms=receipt.retry_after_ms, result=receipt.result,
            step_status=receipt.step_status, timings=receipt.timings, cost=receipt.cost, due_at=receipt.due_at,
            deadline=receipt.deadline, delivery_timeout_ms=receipt.delivery_timeout_ms, reroutes=receipt.reroutes,
            reused_from=receipt.reused_from, callback=receipt.callback,
        )



_writer: FlatReceiptWriter | None = None
_checked = False


def flat_writer() -> FlatReceiptWriter | None:
    """The process's writer while receipts are written single-object with today's schema, else None (a Schema
    Registry, or receipts pinned to an older version by REACH_RECORDS_WRITE_AS: the codec writes those)."""
    global _writer, _checked
    default = _codec.default_codec()
    if _codec.wire_codec() is not default or default.pinned("Receipt"):
        return None
    if not _checked:
        _writer, _checked = FlatReceiptWriter.create(), True
    return _writer


def encode_receipt(receipt: Receipt) -> bytes:
    """`codec.encode(receipt)`, by the flat writer when it can."""
    writer = flat_writer()
    fast = writer.encode_receipt(receipt) if writer is not None else None
    return fast if fast is not None else _codec.encode(receipt)


def as_dict(**fields: Any) -> dict[str, Any]:
    """The dict `codec.encode_dict("Receipt", ...)` takes for the same receipt (the reference)."""
    out = dict(fields)
    out["status"] = out["status"].value
    if out.get("step_status") is not None:
        out["step_status"] = out["step_status"].value
    if out.get("error") is not None:
        out["error"] = out["error"].model_dump()
    if out.get("timings") is None:
        out.pop("timings", None)
    return out


def _symbols(schema: dict[str, Any], field: str) -> list[str]:
    spec = next(f for f in schema["fields"] if f["name"] == field)["type"]
    enum = next(t for t in spec if isinstance(t, dict)) if isinstance(spec, list) else spec
    return list(enum["symbols"])


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
    ]
