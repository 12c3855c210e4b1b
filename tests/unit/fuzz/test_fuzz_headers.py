"""Fuzzing the header readers: any header shape or value reads without raising, or raises the reader's typed error."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from reach import dlq, tracing
from reach.agent import inbox
from reach.envelopes import new_envelope
from reach.kafka import codec, headers
from reach.kafka.headers import HeaderError
from reach.names import Names
from reach.records import DeadLetter, Envelope
from reach.settings import KafkaSettings, RedisSettings
from reach.streams.delays.forwarder import DelayForwarder
from reach.terminals import Fence, MemorySlots
from tests.unit.fuzz.strategies import frames, mutated
from tests.unit.streams.kafka_fakes import FakeConsumer, FakeMessage, FakeProducer

NAMES = [headers.TRACEPARENT, headers.MESSAGE_ID, headers.DUE_AT, headers.TARGET, headers.ORIGIN_OFFSET]
names = st.one_of(st.sampled_from(NAMES), st.text(max_size=12))
values = st.one_of(
    st.none(),
    st.binary(max_size=64),
    st.text(max_size=32),
    st.integers(-(2**70), 2**70).map(lambda n: str(n).encode()),
    st.sampled_from([b"00-" + b"f" * 32 + b"-" + b"0" * 16 + b"-01", b"\xff\xfe", b" 12 ", b"1_000",
                     "\u0663".encode()]),
)
raw_headers = st.one_of(
    st.none(),
    st.lists(st.tuples(names, values), max_size=6),
    st.dictionaries(names, values, max_size=6),
)
ENVELOPE = new_envelope("demo.echo", {"x": 1})


@given(raw=raw_headers)
def test_pairs_and_text_read_any_headers(raw: headers.Headers | None) -> None:
    found = headers.pairs(raw)
    assert all(isinstance(k, str) and isinstance(v, bytes) for k, v in found)
    for name in NAMES:
        value = headers.text(found, name)
        assert value is None or isinstance(value, str)


@given(raw=raw_headers)
def test_integer_returns_an_int_or_raises_header_error(raw: headers.Headers | None) -> None:
    found = headers.pairs(raw)
    last = dict(found)  # the last value of a repeated header wins
    for name in NAMES:
        try:
            value = headers.integer(found, name)
        except HeaderError as exc:
            assert exc.name == name and exc.raw == last[name]
        else:
            assert (value is None) == (name not in last)
            assert value is None or value == int(last[name].decode("ascii"))


@given(number=st.integers(-(2**63), 2**63 - 1))
def test_integer_reads_what_reach_writes(number: int) -> None:
    assert headers.integer([(headers.DUE_AT, str(number).encode())], headers.DUE_AT) == number


@given(raw=raw_headers)
def test_inbox_headers_of_reads_any_shape(raw: headers.Headers | None) -> None:
    found = inbox.headers_of(FakeMessage("fz.agent.fuzz", 0, 7, b"", None, raw))  # type: ignore[arg-type]
    assert all(isinstance(v, bytes) for _, v in found)


@given(value=st.one_of(st.none(), st.binary(max_size=128), mutated(frames("Envelope"))), raw=raw_headers)
def test_inbox_read_returns_an_envelope_or_a_bad_record(value: bytes | None, raw: headers.Headers | None) -> None:
    read = inbox.read(value, headers.pairs(raw))
    assert isinstance(read, Envelope | inbox.BadRecord)
    if isinstance(read, inbox.BadRecord):
        assert read.reason in (inbox.UNDECODABLE, inbox.UNKNOWN_SCHEMA) and read.message


@given(raw=raw_headers)
def test_tracing_extract_reads_any_headers(raw: headers.Headers | None) -> None:
    tracing.extract(headers.pairs(raw), ENVELOPE)


@given(value=st.one_of(st.binary(max_size=128), mutated(frames("DeadLetter"))),
       inner=st.one_of(st.binary(max_size=64), mutated(st.just(codec.encode(ENVELOPE)))))
def test_dlq_parse_returns_a_letter_or_none(value: bytes, inner: bytes) -> None:
    letter, _ = dlq.letter(inner, reason=dlq.UNDECODABLE, error=None, origin=("fz.cap.x", 0, 1))
    for raw in (value, letter):
        parsed = dlq.parse(0, 1, 2, raw)
        assert parsed is None or isinstance(parsed.record, DeadLetter)
    assert dlq.parse(0, 1, 2, letter) is not None, "a valid letter parses whatever bytes it carries"


def _forward(hdrs: list[tuple[str, bytes]], value: bytes) -> FakeProducer:
    # a fresh register per call: every example ends the same message, and none may find an earlier one's ending
    forwarder = DelayForwarder(names=Names("fz"), tiers=["1s"], clock=lambda: 10**13, kafka=KafkaSettings(),
                               redis=RedisSettings(),
                               fence=Fence(MemorySlots(), writer="delays"))
    producer = FakeProducer()
    forwarder.process([FakeMessage("fz.retry.1s", 0, 7, value, b"k", hdrs)],  # type: ignore[list-item]
                      consumer=FakeConsumer(), producer=producer)  # type: ignore[arg-type]
    return producer


def _outcome(producer: FakeProducer) -> list[str]:
    """Forwarded (one record to a capability topic) or dead-lettered (the letter and its receipt)."""
    topics = sorted(t for t, _, _ in producer.sent)
    assert topics in (["fz.dlq", "fz.receipts"],) or (len(topics) == 1 and topics[0].startswith("fz.cap.")), topics
    return topics


@given(due=values.filter(lambda v: v is not None), target=st.binary(max_size=24))
def test_the_delay_tier_survives_any_due_at_and_target_header(due: bytes | str, target: bytes) -> None:
    raw = due.encode() if isinstance(due, str) else due
    producer = _forward([(headers.DUE_AT, raw), (headers.TARGET, target)], codec.encode(ENVELOPE))
    if not producer.sent:  # held: only a well-formed due time after the clock may wait
        assert raw.strip().isdigit() and int(raw) > 10**13, raw
        return
    _outcome(producer)


@given(target=st.sampled_from(["fz.control", "fz.registry", "other.cap.demo.echo", "fz.receipts"]))
def test_the_delay_tier_forwards_only_to_capability_topics(target: str) -> None:
    assert _outcome(_forward([(headers.TARGET, target.encode())], codec.encode(ENVELOPE))) == ["fz.dlq", "fz.receipts"]
