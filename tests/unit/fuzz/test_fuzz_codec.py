"""Fuzzing the codec: random bytes, valid frames, mutated frames; decoders raise nothing but DecodeError."""

from __future__ import annotations

from hypothesis import assume, given
from hypothesis import strategies as st

from reach.kafka import codec
from reach.kafka.codec import MARKER, BadFraming, ConfluentCodec, CorruptBody, DecodeError, InvalidRecord, UnknownSchema
from reach.records import AgentRegistration, AvroRecord, Control, DeadLetter, Envelope, Receipt
from tests.unit.fuzz.strategies import frames, mutated

MODELS: list[type[AvroRecord]] = [Envelope, Receipt, AgentRegistration, DeadLetter, Control]
KNOWN = frozenset().union(*(codec.default_codec().known_fingerprints(m.avro_name) for m in MODELS))


def _decode_or_typed_error(data: bytes, model: type[AvroRecord]) -> AvroRecord | DecodeError:
    try:
        return codec.default_codec().decode(data, model)
    except DecodeError as exc:  # anything else escapes and fails the test
        assert exc.raw == data, "a decode error carries the raw bytes for its dead letter"
        return exc


@given(model=st.sampled_from(MODELS),
       data=st.one_of(st.binary(max_size=256), st.binary(max_size=256).map(lambda b: MARKER + b)))
def test_random_bytes_raise_only_decode_errors(model: type[AvroRecord], data: bytes) -> None:
    _decode_or_typed_error(data, model)


@given(model=st.sampled_from(MODELS), data=st.data())
def test_a_random_body_behind_a_known_fingerprint_raises_only_decode_errors(
    model: type[AvroRecord], data: st.DataObject
) -> None:
    fp = data.draw(st.sampled_from(sorted(codec.default_codec().known_fingerprints(model.avro_name))))
    _decode_or_typed_error(MARKER + fp + data.draw(st.binary(max_size=512)), model)


@given(model=st.sampled_from(MODELS), data=st.data())
def test_valid_frames_decode_or_break_a_model_rule(model: type[AvroRecord], data: st.DataObject) -> None:
    frame = data.draw(frames(model.avro_name))
    codec.decode_dict(model.avro_name, frame)  # any datum the schema allows reads back as a dict
    result = _decode_or_typed_error(frame, model)
    assert isinstance(result, model | InvalidRecord), result  # the model may refuse it, typed


@given(model=st.sampled_from(MODELS), data=st.data())
def test_mutated_frames_raise_only_decode_errors(model: type[AvroRecord], data: st.DataObject) -> None:
    _decode_or_typed_error(data.draw(mutated(frames(model.avro_name))), model)


@given(model=st.sampled_from(MODELS), data=st.data())
def test_every_strict_prefix_of_a_frame_is_refused(model: type[AvroRecord], data: st.DataObject) -> None:
    frame = data.draw(frames(model.avro_name))
    cut = data.draw(st.integers(0, len(frame) - 1))
    result = _decode_or_typed_error(frame[:cut], model)
    assert isinstance(result, BadFraming | CorruptBody), f"a {cut}-byte prefix of {len(frame)} read as {result!r}"


@given(model=st.sampled_from(MODELS), data=st.data())
def test_an_unknown_fingerprint_is_unknown_schema(model: type[AvroRecord], data: st.DataObject) -> None:
    frame = data.draw(frames(model.avro_name))
    fp = data.draw(st.binary(min_size=8, max_size=8))
    assume(fp not in KNOWN)
    result = _decode_or_typed_error(frame[:2] + fp + frame[10:], model)
    assert isinstance(result, UnknownSchema) and result.fingerprint == fp


@given(data=st.data())
def test_another_records_frame_is_never_read_as_this_one_silently(data: st.DataObject) -> None:
    writer, reader = data.draw(st.permutations(MODELS).map(lambda ms: ms[:2]))
    result = _decode_or_typed_error(data.draw(frames(writer.avro_name)), reader)
    assert isinstance(result, UnknownSchema) and writer.avro_name in str(result)


_REGISTRY = ConfluentCodec("mock://reach-fuzz")


def _registry_frame(model: type[AvroRecord], data: st.DataObject) -> bytes:
    record = codec.decode(data.draw(frames(model.avro_name)), model)
    return _REGISTRY.encode(record)


@given(model=st.sampled_from([Envelope, Receipt]), data=st.data())
def test_confluent_framing_raises_only_decode_errors(model: type[AvroRecord], data: st.DataObject) -> None:
    valid = _registry_frame(model, data)
    frame = data.draw(st.one_of(
        st.just(valid),
        mutated(st.just(valid)),
        st.binary(max_size=256).map(lambda b: b"\x00" + b),
        st.integers(0, len(valid) - 1).map(lambda n: valid[:n]),
    ))
    try:
        got = _REGISTRY.decode(frame, model)
    except DecodeError as exc:
        assert exc.raw == frame
    else:
        assert isinstance(got, model)
