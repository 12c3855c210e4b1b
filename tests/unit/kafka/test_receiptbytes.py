"""The receipt writer generated from Receipt.avsc (reach.kafka.avrogen) writes exactly fastavro's bytes: for every
field and nested record, from a model, a decoded dict or keyword arguments; a field added to the schema is written
without a code change. The generated reader reads what fastavro reads and refuses what it refuses."""

from __future__ import annotations

from io import BytesIO
from typing import Any

import pytest
from fastavro import parse_schema, schemaless_writer
from hypothesis import given, settings
from hypothesis import strategies as st

from reach.kafka import avrogen, codec
from reach.kafka.receiptbytes import ReceiptWriter, as_dict, decode_receipt, encode_receipt, flat_writer
from reach.receipts import receipt_for, started_bytes
from reach.records import (
    CandidateScore,
    ChannelDelivery,
    Chunk,
    Decision,
    Envelope,
    ErrorInfo,
    FanOut,
    FanOutDelivery,
    InputRequest,
    IntentCandidate,
    IntentResolution,
    Progress,
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


DOUBLES = st.floats(allow_nan=False)
NESTED = st.fixed_dictionaries({}, optional={
    "decision": _optional(st.builds(
        Decision, candidates=st.lists(st.builds(CandidateScore, instance_id=TEXT, agent_id=TEXT, score=DOUBLES,
                                                fit=DOUBLES, locality=DOUBLES, load=DOUBLES, affinity=DOUBLES,
                                                parts=st.dictionaries(TEXT, DOUBLES, max_size=3),
                                                arm=_optional(TEXT)), max_size=3),
        picked_instance=_optional(TEXT), topic=_optional(TEXT), partition=_optional(INTS), offset=_optional(LONGS),
        weights=st.dictionaries(TEXT, DOUBLES, max_size=3), arm=_optional(TEXT), admission=_optional(TEXT))),
    "channel": _optional(st.builds(ChannelDelivery, channel=TEXT, provider_message_id=_optional(TEXT),
                                   callback_id=_optional(TEXT))),
    "resolution": _optional(st.builds(IntentResolution, stage=TEXT, intent=TEXT, candidates=st.lists(
        st.builds(IntentCandidate, capability=TEXT, score=DOUBLES, source=TEXT), max_size=2))),
    "progress": _optional(st.builds(Progress, fraction=_optional(DOUBLES), note=_optional(TEXT), chunks=st.lists(
        st.builds(Chunk, seq=LONGS, kind=TEXT, data=TEXT, append=st.booleans()), max_size=3))),
    "input": _optional(st.builds(InputRequest, question=TEXT, turn=INTS, answer=_optional(TEXT),
                                 origin_offset=_optional(LONGS))),
    "usage": _optional(st.builds(Usage, input_tokens=LONGS, output_tokens=LONGS, model=_optional(TEXT),
                                 cost_micros=_optional(LONGS))),
    "fanout": _optional(st.builds(FanOut, deliveries=st.lists(st.builds(
        FanOutDelivery, agent_id=TEXT, message_id=TEXT, status=_optional(st.sampled_from(list(Status)))),
        max_size=3))),
})


@pytest.fixture(scope="module")
def writer() -> ReceiptWriter:
    made = ReceiptWriter.create()
    assert made is not None, "the generated writer does not match the codec"
    return made


@settings(max_examples=300, deadline=None)
@given(fields=FIELDS)
def test_generated_bytes_are_the_codecs_and_decode_to_the_same_record(fields: dict[str, Any]) -> None:
    writer = ReceiptWriter.create()
    assert writer is not None
    fast = writer.encode(**fields)
    generic = codec.default_codec().encode_dict("Receipt", as_dict(**fields))
    assert fast == generic
    assert codec.decode_dict("Receipt", fast) == codec.decode_dict("Receipt", generic)


@settings(max_examples=300, deadline=None)
@given(fields=FIELDS, nested=NESTED)
def test_every_receipt_with_nested_records_is_written_as_fastavro_writes_it(fields: dict[str, Any],
                                                                            nested: dict[str, Any]) -> None:
    receipt = Receipt(**fields, **nested)
    writer = ReceiptWriter.create()
    assert writer is not None
    generic = codec.encode(receipt)
    assert writer.encode_receipt(receipt) == generic, "from the model"
    assert writer.encode_dict(codec.decode_dict("Receipt", generic)) == generic, "from the decoded dict"


@settings(max_examples=300, deadline=None)
@given(fields=FIELDS, nested=NESTED, cut=st.integers(0, 400), extra=st.binary(min_size=1, max_size=3))
def test_the_generated_reader_reads_what_fastavro_reads_and_refuses_what_it_refuses(
        fields: dict[str, Any], nested: dict[str, Any], cut: int, extra: bytes) -> None:
    raw = codec.encode(Receipt(**fields, **nested))
    assert decode_receipt(raw) == codec.decode_dict("Receipt", raw)
    for broken in (raw[:max(codec.HEADER_SIZE, len(raw) - 1 - cut)], raw + extra):
        with pytest.raises(codec.DecodeError):
            codec.decode_dict("Receipt", broken)
        with pytest.raises(codec.DecodeError):
            decode_receipt(broken)


def test_a_receipt_of_an_older_version_is_read_by_the_codec() -> None:
    from pathlib import Path

    from reach.kafka.codec import SCHEMA_ROOT, Codec

    oldest = min((SCHEMA_ROOT / "history" / "Receipt").glob("*.avsc"), key=lambda p: int(p.stem))
    older = Codec()
    older.pin("Receipt", int(Path(oldest).stem))
    raw = older.encode(Receipt(message_id="m", trace_id="t", tenant="d", capability="c", status=Status.STARTED, at=1))
    assert raw[:codec.HEADER_SIZE] != codec.encode(Receipt(message_id="m", trace_id="t", tenant="d", capability="c",
                                                           status=Status.STARTED, at=1))[:codec.HEADER_SIZE]
    assert decode_receipt(raw) == codec.decode_dict("Receipt", raw)


def test_a_field_added_to_the_schema_is_written_without_a_code_change() -> None:
    schema = codec.default_codec().schema("Receipt")
    changed = {**schema, "fields": [*schema["fields"],
                                    {"name": "extra", "type": ["null", "string"], "default": None},
                                    {"name": "tags", "type": {"type": "array", "items": "string"}, "default": []}]}
    record = {**Receipt(message_id="m", trace_id="t", tenant="d", capability="c", status=Status.COMPLETED,
                        at=1).to_avro(), "extra": "x", "tags": ["a", "b"]}
    reference = BytesIO()
    schemaless_writer(reference, parse_schema(changed), record)
    assert avrogen.writer(changed)(record) == reference.getvalue()


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


def test_a_completed_model_is_written_by_the_fast_path(writer: ReceiptWriter) -> None:
    receipt = receipt_for(_envelope(), Status.COMPLETED, agent_id="a", instance_id="i", step_status=StepStatus.OK,
                          result=b'{"ok":true}', timings={"run_ms": 12}, cost=0.5)
    assert writer.encode_receipt(receipt) == codec.encode(receipt) == encode_receipt(receipt)


def test_nested_records_are_written_by_the_fast_path_too(writer: ReceiptWriter) -> None:
    receipt = receipt_for(_envelope(), Status.COMPLETED, agent_id="a", instance_id="i",
                          usage=Usage(input_tokens=3, output_tokens=4), channel=ChannelDelivery(channel="webhook"))
    assert writer.encode_receipt(receipt) == encode_receipt(receipt) == codec.encode(receipt)


def test_with_a_schema_registry_the_wire_codec_frames_receipts(monkeypatch: pytest.MonkeyPatch) -> None:
    class Registry:
        def encode(self, record: Receipt) -> bytes:
            return b"registry-framed"

    monkeypatch.setattr(codec, "_wire", Registry())
    assert flat_writer() is None
    assert encode_receipt(receipt_for(_envelope(), Status.COMPLETED, agent_id="a")) == b"registry-framed"
    assert started_bytes(_envelope(), agent_id="a", instance_id="i") == b"registry-framed"


def test_a_writer_that_does_not_match_the_codec_is_not_used(monkeypatch: pytest.MonkeyPatch) -> None:
    real = avrogen.writer
    monkeypatch.setattr(avrogen, "writer", lambda schema, header=b"": lambda record: real(schema, header=header)(
        record) + b"\x00")
    assert ReceiptWriter.create() is None


@settings(max_examples=500, deadline=None)
@given(n=LONGS | st.integers(min_value=2**33, max_value=2**42))
def test_varint_is_avro_zigzag(n: int) -> None:
    from io import BytesIO

    from fastavro import schemaless_writer

    from reach.kafka.avrogen import varint

    buf = BytesIO()
    schemaless_writer(buf, "long", n)
    assert varint(n) == buf.getvalue()
