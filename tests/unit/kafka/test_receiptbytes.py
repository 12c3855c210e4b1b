"""The flat receipt encoder (the agent's STARTED and outcome receipts) writes exactly the codec's bytes."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from reach.kafka import codec
from reach.kafka.receiptbytes import FlatReceiptWriter, as_dict, encode_receipt, flat_writer
from reach.receipts import receipt_for, started_bytes
from reach.records import (
    ChannelDelivery,
    Envelope,
    ErrorInfo,
    Receipt,
    Status,
    StepStatus,
    Usage,
)

LONGS = st.integers(min_value=-(2**63), max_value=2**63 - 1)
INTS = st.integers(min_value=-(2**31), max_value=2**31 - 1)
TEXT = st.text(max_size=80)


def _optional(strategy: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    return st.none() | strategy


FIELDS = st.fixed_dictionaries({
    "message_id": TEXT, "generation": INTS, "trace_id": TEXT, "tenant": TEXT, "capability": TEXT,
    "agent_id": _optional(TEXT), "instance_id": _optional(TEXT),
    "status": st.sampled_from(list(Status)), "attempt": INTS, "at": LONGS,
}, optional={
    "error": _optional(st.builds(ErrorInfo, kind=TEXT, code=TEXT, message=st.text(max_size=300))),
    "retry_after_ms": _optional(LONGS), "result": _optional(st.binary(max_size=300)),
    "step_status": _optional(st.sampled_from(list(StepStatus))),
    "timings": st.dictionaries(TEXT, LONGS, max_size=5),
    "cost": _optional(st.floats(allow_nan=False)), "due_at": _optional(LONGS), "deadline": _optional(LONGS),
    "delivery_timeout_ms": _optional(INTS), "reroutes": INTS, "reused_from": _optional(TEXT),
    "callback": _optional(st.text(max_size=200)),
})


@pytest.fixture(scope="module")
def writer() -> FlatReceiptWriter:
    made = FlatReceiptWriter.create()
    assert made is not None, "the flat writer no longer matches the Receipt schema"
    return made


@settings(max_examples=300, deadline=None)
@given(fields=FIELDS)
def test_fast_bytes_are_the_codecs_and_decode_to_the_same_record(fields: dict[str, Any]) -> None:
    writer = FlatReceiptWriter.create()
    assert writer is not None
    fast = writer.encode(**fields)
    generic = codec.default_codec().encode_dict("Receipt", as_dict(**fields))
    assert fast == generic
    assert codec.decode_dict("Receipt", fast) == codec.decode_dict("Receipt", generic)


def _envelope(**over: Any) -> Envelope:
    return Envelope(message_id="m-1", trace_id="t-1", tenant="acme", source="test", capability="echo.text",
                    payload=b"{}", created_at=1_800_000_000_000, deadline=1_800_000_030_000,
                    delivery_timeout_ms=30_000, **over)


@pytest.mark.parametrize("envelope", [
    _envelope(),
    _envelope(attempt=3, generation=2, reroutes=1, callback='{"channel":"webhook","endpoint":"https://h/x"}'),
])
def test_started_bytes_decode_to_the_receipt_the_model_path_writes(envelope: Envelope) -> None:
    fast = codec.decode(started_bytes(envelope, agent_id="agent://a/b", instance_id="i-1"), Receipt)
    model = receipt_for(envelope, Status.STARTED, agent_id="agent://a/b", instance_id="i-1")
    assert fast.model_copy(update={"at": model.at}) == model
    assert abs(fast.at - model.at) < 5_000


def test_a_completed_model_is_written_by_the_fast_path(writer: FlatReceiptWriter) -> None:
    receipt = receipt_for(_envelope(), Status.COMPLETED, agent_id="a", instance_id="i", step_status=StepStatus.OK,
                          result=b'{"ok":true}', timings={"run_ms": 12}, cost=0.5)
    assert writer.encode_receipt(receipt) == codec.encode(receipt) == encode_receipt(receipt)


@pytest.mark.parametrize("nested", [
    {"usage": Usage(input_tokens=3, output_tokens=4)},
    {"channel": ChannelDelivery(channel="webhook")},
])
def test_nested_records_are_left_to_the_codec(writer: FlatReceiptWriter, nested: dict[str, Any]) -> None:
    receipt = receipt_for(_envelope(), Status.COMPLETED, agent_id="a", instance_id="i", **nested)
    assert writer.encode_receipt(receipt) is None
    assert encode_receipt(receipt) == codec.encode(receipt)


def test_with_a_schema_registry_the_wire_codec_frames_receipts(monkeypatch: pytest.MonkeyPatch) -> None:
    class Registry:
        def encode(self, record: Receipt) -> bytes:
            return b"registry-framed"

    monkeypatch.setattr(codec, "_wire", Registry())
    assert flat_writer() is None
    assert encode_receipt(receipt_for(_envelope(), Status.COMPLETED, agent_id="a")) == b"registry-framed"
    assert started_bytes(_envelope(), agent_id="a", instance_id="i") == b"registry-framed"


def test_a_changed_schema_turns_the_fast_path_off(monkeypatch: pytest.MonkeyPatch) -> None:
    schema = codec.default_codec().schema("Receipt")
    changed = {**schema, "fields": [*schema["fields"], {"name": "extra", "type": ["null", "string"],
                                                        "default": None}]}
    monkeypatch.setattr(codec.default_codec(), "schema", lambda name: changed)
    assert FlatReceiptWriter.create() is None


@settings(max_examples=500, deadline=None)
@given(n=LONGS | st.integers(min_value=2**33, max_value=2**42))
def test_varint_is_avro_zigzag(n: int) -> None:
    from io import BytesIO

    from fastavro import schemaless_writer

    from reach.kafka.receiptbytes import varint

    buf = BytesIO()
    schemaless_writer(buf, "long", n)
    assert varint(n) == buf.getvalue()
